"""Batch specs and clean batches: the numpy-only groundwork of the contract tests.

A batch spec maps each field of a training batch to its fixed ``(shape, dtype)``. Shapes
never change across examples, so a jitted trainer compiles once per contract run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

BatchSpec = Mapping[str, tuple[tuple[int, ...], np.dtype]]
Batch = dict[str, np.ndarray]
CleanBatchMaker = Callable[[np.random.Generator], Mapping[str, Any]]


@dataclass(frozen=True)
class FieldRange:
    """The valid values of one float field, for the clean cases of ``no_false_alarm``.

    - ``max_magnitude``: clean values never exceed this ``|x|`` (rescaling stops there).
    - ``nonzero_per_row``: every row (index along the first axis) keeps at least this many
      non-zero values, e.g. ``1`` for an attention mask that is never empty.
    """

    max_magnitude: float | None = None
    nonzero_per_row: int = 0

    def __post_init__(self) -> None:
        top = self.max_magnitude
        if top is not None and not (isinstance(top, int | float) and 0 < top < float("inf")):
            raise ValueError(f"FieldRange.max_magnitude must be a finite number > 0, got {top!r}")
        rows = self.nonzero_per_row
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ValueError(f"FieldRange.nonzero_per_row must be an int >= 0, got {rows!r}")

    def allows_zeros(self) -> bool:
        return self.nonzero_per_row == 0

    def respect(self, array: np.ndarray, original: np.ndarray | None = None) -> np.ndarray:
        """``array`` brought into range: magnitudes clipped, rows with too few non-zeros
        restored from ``original`` (when that row is valid) or given leading ones."""
        out = array
        if self.max_magnitude is not None:
            top = np.asarray(self.max_magnitude, dtype=array.dtype)
            out = np.clip(out, -top, top)
        if self.nonzero_per_row:
            out = np.array(out, copy=True)
            rows = out.reshape(out.shape[0], -1) if out.ndim else out.reshape(1, 1)
            need = min(self.nonzero_per_row, rows.shape[1])
            kept = None if original is None else original.reshape(rows.shape)
            for row in np.flatnonzero(np.count_nonzero(rows, axis=1) < need):
                if kept is not None and np.count_nonzero(kept[row]) >= need:
                    rows[row] = kept[row]
                else:
                    rows[row, :need] = min(1.0, self.max_magnitude or 1.0)
            out = rows.reshape(out.shape)
        return out


def as_numpy(value: Any) -> np.ndarray:
    """A numpy array from numpy, JAX or torch data (torch is never imported here)."""
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def spec_from_example(example: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The batch spec of one example batch: its fields' shapes and dtypes."""
    if not isinstance(example, Mapping) or not example:
        raise ValueError("the example batch must be a non-empty dict {field: array}")
    arrays = {str(field): as_numpy(value) for field, value in example.items()}
    return normalise_spec({field: (a.shape, a.dtype) for field, a in arrays.items()})


def normalise_spec(batch_spec: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Return ``{field: (shape tuple, np.dtype)}`` or raise ``ValueError`` naming the field."""
    if not isinstance(batch_spec, Mapping) or not batch_spec:
        raise ValueError("batch_spec must be a non-empty mapping {field: (shape, dtype)}")
    spec: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for field, entry in batch_spec.items():
        try:
            shape, dtype = entry
            shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
            dtype = np.dtype(dtype)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"batch_spec[{field!r}] must be (shape, numpy dtype), got {entry!r}"
            ) from err
        if any(n < 1 for n in shape):
            raise ValueError(f"batch_spec[{field!r}] has an empty dimension: shape {shape}")
        if dtype.kind not in "fiub":
            raise ValueError(
                f"batch_spec[{field!r}] has dtype {dtype}: only float, int and bool fields"
            )
        spec[str(field)] = (shape, dtype)
    return spec


def float_fields(spec: BatchSpec) -> tuple[str, ...]:
    """The fields that can hold NaN or Inf, in spec order."""
    return tuple(field for field, (_, dtype) in spec.items() if dtype.kind == "f")


def default_clean_batch(spec: BatchSpec, rng: np.random.Generator) -> Batch:
    """Standard-normal floats, small non-negative ints, random bools: a plain valid batch."""
    batch: Batch = {}
    for field, (shape, dtype) in spec.items():
        if dtype.kind == "f":
            batch[field] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            batch[field] = rng.random(shape) < 0.5
        else:
            batch[field] = rng.integers(0, 2, size=shape).astype(dtype)
    return batch


def check_batch(spec: BatchSpec, batch: Mapping[str, Any], source: str) -> Batch:
    """Coerce ``batch`` to numpy arrays and check it against ``spec`` and for finiteness.

    ``source`` names where the batch came from, so the error says which function to fix.
    """
    if not isinstance(batch, Mapping):
        raise TypeError(f"{source} returned {type(batch).__name__}, expected a dict of arrays")
    if set(batch) != set(spec):
        raise ValueError(
            f"{source} returned fields {sorted(batch)}; batch_spec declares {sorted(spec)}"
        )
    checked: Batch = {}
    for field, (shape, dtype) in spec.items():
        array = as_numpy(batch[field])
        if array.shape != shape or array.dtype != dtype:
            raise ValueError(
                f"{source} returned field {field!r} as {array.dtype}{list(array.shape)}; "
                f"batch_spec declares {dtype}{list(shape)}"
            )
        if dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"{source} returned a non-finite value in field {field!r}")
        checked[field] = array
    return checked


def describe_array(array: np.ndarray) -> str:
    """A one-line summary of an array (range and notable structure) for failure reports."""
    if array.dtype.kind != "f":
        return f"{array.dtype}{list(array.shape)} in [{array.min()}, {array.max()}]"
    notes = []
    if not array.any():
        notes.append("all zeros")
    elif array.ndim >= 1 and array.shape[0] > 1 and (array == array[:1]).all(axis=0).any():
        notes.append("has constant columns")
    magnitude = float(np.abs(array).max())
    return (
        f"{array.dtype}{list(array.shape)} in [{array.min():.3g}, {array.max():.3g}], "
        f"max |x| {magnitude:.3g}" + "".join(f", {note}" for note in notes)
    )
