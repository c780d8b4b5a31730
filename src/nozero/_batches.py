"""Batch specs and clean batches: the numpy-only groundwork of the contract tests.

A batch spec maps each field of a training batch to its fixed ``(shape, dtype)``. Shapes
never change across examples, so a jitted trainer compiles once per contract run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

BatchSpec = Mapping[str, tuple[tuple[int, ...], np.dtype]]
Batch = dict[str, np.ndarray]
CleanBatchMaker = Callable[[np.random.Generator], Mapping[str, Any]]


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
        array = np.asarray(batch[field])
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
