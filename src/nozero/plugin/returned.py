"""Reading what ``run`` returned: a history in any of the shapes users keep one in, or a
model / params / state whose float arrays are checked finite.

Histories: ``(loss, grad_norm)`` pairs; a list of losses, one a step (or micro-batch);
a list of ``{"loss": ..., "grad_norm": ...}``
dicts (Lightning's logged metrics collected per step); a dict of lists (Keras'
``History.history``) or an object holding one (Keras' ``History``, and the ``records``
of the result of ``nozero.jax.Guard.run``). States: numpy, JAX and torch arrays in
dicts, lists, dataclasses, pytrees, ``nn.Module`` and state dicts, Keras models.
Nothing here imports torch, JAX or Keras: a value is read through the
library that made it, which is already imported.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from nozero.plugin.batches import as_numpy

# (loss, grad_norm); grad_norm is None where the history records the loss only.
Entry = tuple[float, float | None]
MAX_LEAVES = 100_000
# Lightning logs per-step values as "train_loss" or "loss_step", epoch means as "..._epoch".
_EPOCH_SUFFIX = "_epoch"


class ReaderFailure(Exception):
    """nozero could not read one leaf of a returned value: the plugin's problem, named by
    the leaf's path, never the trainer's."""

    def __init__(self, path: str, error: Exception) -> None:
        super().__init__(f"{path}: {error!r}")
        self.path = path
        self.error = error


@dataclasses.dataclass(frozen=True)
class History:
    """Per-step (or, for Keras' ``History``, per-epoch) losses and grad norms."""

    entries: tuple[Entry, ...]
    unit: str = "step"  # "epoch": each entry is a mean over steps (a non-finite step shows)
    source: str = "(loss, grad_norm) pairs"


def _is_torch(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def _scalar(value: Any) -> float | None:
    """A Python, numpy, JAX or torch scalar as a float, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    shape = getattr(value, "shape", None)
    if shape is None or tuple(shape) != ():
        return None
    if _is_torch(value):
        value = value.detach().float()
    return float(value)


def _pairs(returned: Sequence) -> History | None:
    entries = []
    for entry in returned:
        if not (isinstance(entry, list | tuple) and len(entry) == 2):
            return None
        loss, grad_norm = _scalar(entry[0]), _scalar(entry[1])
        if loss is None or grad_norm is None:
            return None
        entries.append((loss, grad_norm))
    return History(tuple(entries))


def _tokens(name: Any) -> list[str] | None:
    """A metric name's words; None for a parameter's dotted name (``head.loss.bias``)."""
    text = str(name).lower()
    dotted = "." in text and not text.startswith("grad_")  # Lightning's grad_2.0_norm_total
    if dotted or text.endswith(_EPOCH_SUFFIX):  # never an epoch mean of Lightning's
        return None
    return re.split(r"[_/\s-]+", text)


def _key(names: Sequence[str], *words: str) -> str | None:
    """The metric name holding all ``words`` as words, the exact name first."""
    wanted = "_".join(words)
    if wanted in names:
        return wanted
    for name in names:
        tokens = _tokens(name)
        if tokens and all(word in tokens for word in words):
            return name
    return None


def _metric_keys(names: Sequence[str]) -> tuple[str, str | None] | None:
    loss = _key(names, "loss")
    if loss is None:
        return None
    return loss, _key(names, "grad", "norm")


def _dicts(returned: Sequence) -> History | None:
    """A list of per-step metric dicts, each holding a loss (and maybe a grad norm)."""
    if not all(isinstance(entry, Mapping) for entry in returned):
        return None
    entries = []
    for entry in returned:
        keys = _metric_keys(list(entry))
        if keys is None:
            return None
        loss = _scalar(entry[keys[0]])
        grad_norm = None if keys[1] is None else _scalar(entry[keys[1]])
        if loss is None:
            return None
        entries.append((loss, grad_norm))
    return History(tuple(entries), source="a list of per-step metric dicts")


def _columns(returned: Mapping, unit: str, source: str) -> History | None:
    """A dict of per-step lists (or 1-d arrays) holding a loss column."""
    keys = _metric_keys([k for k in returned if isinstance(k, str)])
    if keys is None:
        return None
    columns = []
    for key in keys:
        column = None if key is None else returned[key]
        if column is None:
            columns.append(None)
            continue
        if not isinstance(column, list | tuple):
            if getattr(column, "ndim", None) != 1:
                return None
            column = list(as_numpy(column))
        values = [_scalar(value) for value in column]
        if any(value is None for value in values):
            return None
        columns.append(values)
    losses, norms = columns
    if norms is not None and len(norms) != len(losses):
        return None
    entries = [(loss, None if norms is None else norms[i]) for i, loss in enumerate(losses)]
    return History(tuple(entries), unit=unit, source=source)


def _losses(returned: Sequence, units: Mapping[int, str]) -> History | None:
    """A list of scalars, one a step (or one a micro-batch): the losses alone. Only at the
    run's own length, so a list of scalar parameters is never taken for one."""
    unit = units.get(len(returned))
    values = [_scalar(value) for value in returned] if unit else []
    if not values or any(value is None for value in values):
        return None
    return History(tuple((v, None) for v in values), unit=unit, source=f"a list of {unit} losses")


def read_history(returned: Any, units: Mapping[int, str] | None = None) -> History | None:
    """``returned`` read as a history, or None when it is not one. ``units`` maps the
    lengths a list of bare losses may have to what each entry is (``{4: "step"}``)."""
    if isinstance(returned, list | tuple) and not hasattr(returned, "_fields") and returned:
        return _pairs(returned) or _dicts(returned) or _losses(returned, units or {})
    if isinstance(returned, Mapping):
        return _columns(returned, "step", "a dict of per-step lists")
    held = getattr(returned, "history", None)  # keras.callbacks.History: one entry an epoch
    if isinstance(held, Mapping) and type(returned).__module__.startswith("keras"):
        return _columns(held, "epoch", "Keras' History (one mean an epoch)")
    records = getattr(returned, "records", None)  # a guard's result: a column per field
    if isinstance(records, Mapping) and not callable(records):
        return _columns(records, "step", f"the per-step records of {type(returned).__name__}")
    return None


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type)


def _extended_dtype(value: Any) -> bool:
    """A JAX extended dtype (typed PRNG keys): no float values, and numpy cannot hold it."""
    jax = sys.modules.get("jax")
    if jax is None or isinstance(value.dtype, np.dtype) or _is_torch(value):
        return False
    return bool(jax.dtypes.issubdtype(value.dtype, jax.dtypes.extended))


def _torch_float(value: Any) -> np.ndarray:
    """A torch tensor's values; bfloat16 and other dtypes numpy lacks read as float32."""
    tensor = value.detach().cpu()
    if tensor.is_floating_point() and tensor.element_size() < 4:
        tensor = tensor.float()
    return tensor.numpy()


def _children(value: Any) -> Iterator[tuple[str, Any]] | None:
    """The named parts of a container-like value, or None for a leaf."""
    if callable(getattr(value, "state_dict", None)) and _is_torch(value):  # module, optimizer
        return ((f".state_dict()[{k!r}]", v) for k, v in value.state_dict().items())
    if isinstance(value, Mapping):
        return ((f"[{k!r}]", v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return ((f"[{i}]", v) for i, v in enumerate(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f".{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value))
    weights = getattr(value, "weights", None)  # a Keras model or layer
    if isinstance(weights, list) and weights and all(_is_array(w) for w in weights):
        return ((f".weights[{i}]", w) for i, w in enumerate(weights))
    jax = sys.modules.get("jax")
    if jax is not None:  # a registered pytree: equinox and nnx modules, flax and optax states
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
        if not (len(leaves) == 1 and leaves[0][1] is value):
            return ((jax.tree_util.keystr(path), leaf) for path, leaf in leaves)
    return None


def _float_array(value: Any, path: str) -> np.ndarray | None:
    """The leaf's values if it is a float array, else None; a failure names the leaf."""
    try:
        if _extended_dtype(value):
            return None
        array = _torch_float(value) if _is_torch(value) else as_numpy(value)
    except Exception as error:
        raise ReaderFailure(path, error) from error
    return None if array.dtype.kind in "biuSUOV" else array


def float_arrays(value: Any, path: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """Every float array in ``value``, with its path (``['dense']['b']``)."""
    if _is_array(value):
        array = _float_array(value, path or "the returned array")
        if array is not None:
            yield path or "the returned array", array
        return
    try:
        children = _children(value)
    except Exception as error:
        raise ReaderFailure(path or "the returned value", error) from error
    if children is not None:
        for name, child in children:
            yield from float_arrays(child, path + name)


def inspect_state(returned: Any) -> tuple[int, str | None]:
    """How many float arrays ``returned`` holds, and the first with a non-finite value."""
    count = 0
    for path, array in float_arrays(returned):
        count += 1
        try:
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        except Exception as error:
            raise ReaderFailure(path, error) from error
        if bad:
            return count, f"{path} holds {bad} non-finite values of {array.size}"
        if count >= MAX_LEAVES:
            break
    return count, None


def finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)
