"""What one ``run`` did: raised (which error, at which step), ran out of time, or returned
a history, a model / params / state, or nothing. The judges read only this."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nozero.contract import NonFiniteError, parse_message
from nozero.plugin.batches import Batch, as_numpy
from nozero.plugin.messages import describe_error, near_miss
from nozero.plugin.trainer import TrainerUnderTest
from nozero.plugin.watchdog import call_with_limit

History = tuple[tuple[float, float], ...]
MAX_LEAVES = 100_000
WHAT_TO_RETURN = (
    "return the per-step (loss, grad_norm) history, or the trained model / params / state "
    "(its float arrays are checked finite)"
)


@dataclass(frozen=True)
class Outcome:
    """How ``run`` ended. ``state_*`` describe a returned model / params / state."""

    returned: bool
    history: History | None = None
    state_type: str | None = None
    state_arrays: int = 0
    bad_array: str | None = None
    malformed: str | None = None
    error: Exception | None = None
    error_text: str = ""
    halt: tuple[int, float, float] | None = None
    timed_out: float | None = None
    stuck_at: str = ""

    @property
    def returned_nothing(self) -> bool:
        return self.returned and self.history is None and self.state_type is None

    def first_non_finite(self) -> tuple[int, float, float] | None:
        for step, (loss, grad_norm) in enumerate(self.history or ()):
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                return step, loss, grad_norm
        return None

    @property
    def continued_non_finite(self) -> bool:
        """Returned normally with a non-finite value in what it returned."""
        return self.first_non_finite() is not None or self.bad_array is not None

    def describe(self) -> str:
        if self.halt is not None:
            step, loss, grad_norm = self.halt
            return (
                f"raised the documented error at step {step} "
                f"(loss={loss!r}, grad_norm={grad_norm!r})"
            )
        if self.timed_out is not None:
            where = f"; it was at:\n{self.stuck_at}" if self.stuck_at else ""
            return f"did not finish within {self.timed_out:g} s{where}"
        if self.error is not None:
            miss = near_miss(self.error)
            return self.error_text + (f"\n    not the documented error: {miss}" if miss else "")
        if self.state_type is not None:
            if self.bad_array is None:
                return (
                    f"returned normally: a {self.state_type} whose {self.state_arrays} "
                    "float arrays are all finite"
                )
            return f"returned normally: a {self.state_type} in which {self.bad_array}"
        if self.history is None:
            return "returned normally, returning nothing"
        bad = self.first_non_finite()
        if bad is None:
            return f"returned normally with an all-finite history of {len(self.history)} entries"
        step, loss, grad_norm = bad
        return (
            "returned normally; its history's first non-finite entry is "
            f"step {step}: loss={loss!r} grad_norm={grad_norm!r}"
        )


def _documented_halt(error: Exception) -> tuple[int, float, float] | None:
    if isinstance(error, NonFiniteError):
        return error.step, error.loss, error.grad_norm
    if isinstance(error, RuntimeError):
        return parse_message(str(error))
    return None


def _is_scalar(value: Any) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return True
    shape = getattr(value, "shape", None)
    return shape is not None and tuple(shape) == ()


def _as_history(returned: Any) -> History | None:
    """A sequence of (loss, grad_norm) scalar pairs as floats, else None."""
    if not isinstance(returned, list | tuple) or hasattr(returned, "_fields"):
        return None
    pairs = []
    for entry in returned:
        if not (isinstance(entry, list | tuple) and len(entry) == 2):
            return None
        if not all(_is_scalar(value) for value in entry):
            return None
        pairs.append((float(as_numpy(entry[0])), float(as_numpy(entry[1]))))
    return tuple(pairs)


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type)


def _children(value: Any) -> Iterator[tuple[str, Any]] | None:
    """The named parts of a container-like value, or None for a leaf."""
    if callable(getattr(value, "state_dict", None)):  # a torch module or optimizer
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
    if "jax" in sys.modules:  # a registered pytree: equinox modules, flax and optax states
        import jax

        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
        if not (len(leaves) == 1 and leaves[0][1] is value):
            return ((jax.tree_util.keystr(path), leaf) for path, leaf in leaves)
    return None


def _float_arrays(value: Any, path: str = "") -> Iterator[tuple[str, np.ndarray]]:
    if _is_array(value):
        array = as_numpy(value)
        if array.dtype.kind not in "biuSUO":
            yield path or "the returned array", array
        return
    children = _children(value)
    if children is not None:
        for name, child in children:
            yield from _float_arrays(child, path + name)


def _inspect_state(returned: Any) -> tuple[int, str | None]:
    """How many float arrays ``returned`` holds, and the first with a non-finite value."""
    count = 0
    for path, array in _float_arrays(returned):
        count += 1
        bad = int(array.size - np.count_nonzero(np.isfinite(array)))
        if bad:
            return count, f"{path} holds {bad} non-finite values of {array.size}"
        if count >= MAX_LEAVES:
            break
    return count, None


def read_returned(returned: Any) -> Outcome:
    """Interpret what ``run`` returned."""
    if returned is None:
        return Outcome(returned=True)
    history = _as_history(returned)
    if history is not None:
        return Outcome(returned=True, history=history)
    count, bad = _inspect_state(returned)
    kind = type(returned).__qualname__
    if count == 0:
        return Outcome(
            returned=True,
            malformed=f"run returned a {kind} holding no float arrays: {WHAT_TO_RETURN}",
        )
    return Outcome(returned=True, state_type=kind, state_arrays=count, bad_array=bad)


def observe(
    trainer: TrainerUnderTest, batches: list[Batch], seconds: float, *, quiet: bool
) -> Outcome:
    """Run the trainer once, within ``seconds``, and record how it ended."""
    result = call_with_limit(trainer.run, (batches,), seconds, quiet=quiet)
    if result.timed_out:
        return Outcome(returned=False, timed_out=seconds, stuck_at=result.stuck_at)
    if result.error is not None:
        error = result.error
        return Outcome(
            returned=False,
            error=error,
            error_text=describe_error(error),
            halt=_documented_halt(error),
        )
    try:
        return read_returned(result.value)
    except Exception as error:  # a returned object that cannot be read is the trainer's bug
        return Outcome(returned=True, malformed=f"run's return value could not be read: {error!r}")
