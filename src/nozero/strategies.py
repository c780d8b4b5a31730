"""Hypothesis strategies for non-finite property tests: clean batches, poisons, poisoned runs.

They compose: ``poisoned_batch_sequences(spec, 8, clean=clean_batch_sequences(spec, 8),
poison=poisons(spec, 8, kinds=HUGE_KINDS))``. Every strategy keeps shapes fixed (so a
jitted trainer compiles once) and shrinks toward step 0, index 0 and the first poison kind.
Built on ``hypothesis.extra.numpy``; ``pytest --nozero`` uses these same strategies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as nps

from nozero._batches import (
    Batch,
    CleanBatchMaker,
    check_batch,
    float_fields,
    normalise_spec,
)

__all__ = [
    "HUGE_KINDS",
    "NON_FINITE_KINDS",
    "Poison",
    "PoisonedRun",
    "apply_poisons",
    "clean_arrays",
    "clean_batch_sequences",
    "clean_batches",
    "poisoned_batch_sequences",
    "poisons",
    "seeds",
]

NON_FINITE_KINDS = ("nan", "+inf", "-inf")
NON_FINITE_VALUES = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}
HUGE_KINDS = ("+huge", "-huge")
# Clean data still spans magnitudes: underflow-prone, small, large. "Large" is capped per
# dtype (see _large_cap) so a correct trainer's sums of squares stay finite.
MAGNITUDES = (1e-30, 1e-6, 1e3, 1e6)
# Poisons called "huge" lie within this factor of the dtype's maximum.
HUGE_RANGE = 1024.0


def seeds() -> st.SearchStrategy[int]:
    """Seeds for numpy generators: a compact, shrinkable stand-in for a whole array."""
    return st.integers(0, 2**32 - 1)


@dataclass(frozen=True)
class Poison:
    """One value written into one element of one field of the batch at one step."""

    kind: str
    field: str
    index: tuple[int, ...]
    value: float
    step: int

    def describe(self) -> str:
        where = ", ".join(str(i) for i in self.index)
        return f"{self.kind} ({self.value!r}) at batches[{self.step}][{self.field!r}][{where}]"


@dataclass(frozen=True)
class PoisonedRun:
    """Batches with poisons written in, and the poisons (in the order drawn)."""

    batches: list[Batch]
    poisons: tuple[Poison, ...]

    @property
    def first_step(self) -> int:
        """The first step that sees a poison: where a correct trainer must stop."""
        return min(poison.step for poison in self.poisons)


def apply_poisons(batches: Sequence[Mapping[str, np.ndarray]], poisons: Iterable[Poison]) -> list:
    """A copy of ``batches`` with each poison written in; the inputs are left untouched."""
    poisoned = [dict(batch) for batch in batches]
    for poison in poisons:
        array = np.array(poisoned[poison.step][poison.field], copy=True)
        array[poison.index] = poison.value
        poisoned[poison.step][poison.field] = array
    return poisoned


def _large_cap(dtype: np.dtype) -> float:
    return float(min(max(MAGNITUDES), np.finfo(dtype).max ** 0.25))


def _float_elements(dtype: np.dtype, bound: float) -> st.SearchStrategy[float]:
    return st.floats(-bound, bound, width=dtype.itemsize * 8)


@st.composite
def _variant_of(draw: st.DrawFn, array: np.ndarray) -> np.ndarray:
    """The array unchanged, zeroed, rescaled, or with some columns made constant."""
    variant = draw(st.sampled_from(("unchanged", "zeros", "rescaled", "constant columns")))
    if variant == "zeros":
        return np.zeros_like(array)
    if variant == "rescaled":
        cap = _large_cap(array.dtype)
        target = draw(st.sampled_from(sorted({m for m in MAGNITUDES if m <= cap} | {cap})))
        peak = float(np.abs(array).max())
        if peak == 0.0:
            return array
        # Rescale so the largest magnitude is exactly ``target``: never beyond the cap.
        # Divide first: ``target / peak`` overflows when the peak is subnormal.
        return (array.astype(np.float64) / peak * target).astype(array.dtype)
    if variant == "constant columns":
        out = array.copy()
        if out.ndim == 1:
            out[:] = out[0]
        else:
            columns = draw(nps.arrays(np.bool_, out.shape[-1]))
            out[..., columns] = out[:1][..., columns]
        return out
    return array


def clean_arrays(shape: Sequence[int], dtype: Any) -> st.SearchStrategy[np.ndarray]:
    """Finite arrays of one fixed shape and dtype, edge cases included.

    Floats: seeded standard-normal noise or sparse arrays of edge floats (zeros, signed
    zeros, subnormals, the cap), then possibly zeroed, rescaled to tiny or large
    magnitudes, or given constant columns. Ints are 0 or 1; bools are arbitrary.
    """
    shape = tuple(int(n) for n in shape)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return nps.arrays(dtype, shape)
    if dtype.kind in "iu":
        return nps.arrays(dtype, shape, elements=st.integers(0, 1))
    noise = seeds().map(
        lambda seed: np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    )
    sparse = nps.arrays(dtype, shape, elements=_float_elements(dtype, _large_cap(dtype)))
    return st.one_of(noise, sparse).flatmap(_variant_of)


@st.composite
def _clean_batch(
    draw: st.DrawFn,
    spec: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    make_clean_batch: CleanBatchMaker | None,
    vary_fields: tuple[str, ...],
) -> Batch:
    if make_clean_batch is None:
        return {field: draw(clean_arrays(*spec[field])) for field in spec}
    made = make_clean_batch(np.random.default_rng(draw(seeds())))
    batch = check_batch(spec, made, "make_clean_batch")
    for field in vary_fields:
        batch[field] = draw(_variant_of(batch[field]))
    return batch


def clean_batches(
    batch_spec: Mapping[str, Any],
    *,
    make_clean_batch: CleanBatchMaker | None = None,
    vary_fields: Sequence[str] | None = None,
) -> st.SearchStrategy[Batch]:
    """Clean batches of ``batch_spec``.

    Without ``make_clean_batch`` every field comes from :func:`clean_arrays`. With it,
    the batch is ``make_clean_batch(rng)`` (valid by construction) and only
    ``vary_fields`` (default: the float fields) are zeroed, rescaled or given constant
    columns.
    """
    spec = normalise_spec(batch_spec)
    fields = float_fields(spec) if vary_fields is None else tuple(vary_fields)
    return _clean_batch(spec, make_clean_batch, fields)


def clean_batch_sequences(
    batch_spec: Mapping[str, Any], steps: int, **clean: Any
) -> st.SearchStrategy[list[Batch]]:
    """``steps`` clean batches (keyword arguments as for :func:`clean_batches`)."""
    batch = clean_batches(batch_spec, **clean)
    return st.lists(batch, min_size=steps, max_size=steps)


@st.composite
def _poison(
    draw: st.DrawFn,
    spec: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    steps: int,
    fields: tuple[str, ...],
    kinds: tuple[str, ...],
) -> Poison:
    kind = draw(st.sampled_from(kinds))
    field = draw(st.sampled_from(fields))
    shape, dtype = spec[field]
    index = draw(st.tuples(*(st.integers(0, n - 1) for n in shape)))
    step = draw(st.integers(0, steps - 1))
    if kind in NON_FINITE_KINDS:
        value = NON_FINITE_VALUES[kind]
    else:
        top = float(np.finfo(dtype).max)
        magnitude = draw(st.floats(top / HUGE_RANGE, top, width=dtype.itemsize * 8))
        value = -magnitude if kind == "-huge" else magnitude
    return Poison(kind=kind, field=field, index=index, value=value, step=step)


def poisons(
    batch_spec: Mapping[str, Any],
    steps: int,
    *,
    fields: Sequence[str] | None = None,
    kinds: Sequence[str] = NON_FINITE_KINDS,
) -> st.SearchStrategy[Poison]:
    """A poison for any element of any of ``fields`` (default: float fields) at any step.

    ``kinds``: any of ``NON_FINITE_KINDS`` (NaN, +Inf, -Inf) and ``HUGE_KINDS`` (finite
    values within a factor 1024 of the dtype's maximum, either sign).
    """
    spec = normalise_spec(batch_spec)
    floats = float_fields(spec)
    chosen = floats if fields is None else tuple(fields)
    unknown = [field for field in chosen if field not in floats]
    if unknown or not chosen:
        raise ValueError(f"poisons: fields {unknown or chosen} are not float fields {floats}")
    bad_kinds = [kind for kind in kinds if kind not in NON_FINITE_KINDS + HUGE_KINDS]
    if bad_kinds or not kinds:
        raise ValueError(f"poisons: unknown kinds {bad_kinds or kinds}")
    if steps < 1:
        raise ValueError(f"poisons: steps must be >= 1, got {steps}")
    return _poison(spec, steps, chosen, tuple(kinds))


def poisoned_batch_sequences(
    batch_spec: Mapping[str, Any],
    steps: int,
    *,
    clean: st.SearchStrategy[list[Batch]] | None = None,
    poison: st.SearchStrategy[Poison] | None = None,
    max_poisons: int = 1,
) -> st.SearchStrategy[PoisonedRun]:
    """``steps`` batches carrying between 1 and ``max_poisons`` poisons."""
    clean = clean_batch_sequences(batch_spec, steps) if clean is None else clean
    poison = poisons(batch_spec, steps) if poison is None else poison
    drawn = st.lists(poison, min_size=1, max_size=max_poisons)
    return st.builds(
        lambda batches, chosen: PoisonedRun(apply_poisons(batches, chosen), tuple(chosen)),
        clean,
        drawn,
    )
