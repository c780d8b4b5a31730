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
from hypothesis.errors import InvalidArgument
from hypothesis.extra import numpy as nps

from nozero.plugin.batches import (
    Batch,
    CleanBatchMaker,
    FieldRange,
    check_batch,
    float_fields,
    normalise_spec,
)

__all__ = [
    "HUGE_KINDS",
    "FieldRange",
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
ANY_VALUE = FieldRange()


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


def _large_cap(dtype: np.dtype, field_range: FieldRange = ANY_VALUE) -> float:
    cap = float(min(max(MAGNITUDES), np.finfo(dtype).max ** 0.25))
    return cap if field_range.max_magnitude is None else min(cap, field_range.max_magnitude)


def largest_clean_magnitude(dtype: np.dtype, field_range: FieldRange = ANY_VALUE) -> float:
    """The largest ``|x|`` a clean float field of ``dtype`` takes (see ``MAGNITUDES``)."""
    return _large_cap(dtype, field_range)


def rescaled(
    array: np.ndarray, target: float, field_range: FieldRange = ANY_VALUE
) -> tuple[np.ndarray, str]:
    """``array`` scaled so its largest magnitude is exactly ``target``, and a note."""
    peak = float(np.abs(array).max())
    if peak == 0.0:
        return array, "unchanged (all zeros: nothing to rescale)"
    # Divide first: ``target / peak`` overflows when the peak is subnormal.
    scaled = (array.astype(np.float64) / peak * target).astype(array.dtype)
    return field_range.respect(scaled, array), f"rescaled to max |x| {target:g}"


def _float_elements(dtype: np.dtype, bound: float) -> st.SearchStrategy[float]:
    return st.floats(-bound, bound, width=dtype.itemsize * 8)


def _variants(field_range: FieldRange) -> tuple[str, ...]:
    kinds = ("unchanged", "zeros", "rescaled", "constant columns")
    return kinds if field_range.allows_zeros() else tuple(k for k in kinds if k != "zeros")


@st.composite
def _described_variant(
    draw: st.DrawFn, array: np.ndarray, field_range: FieldRange = ANY_VALUE
) -> tuple[np.ndarray, str]:
    """The array unchanged, zeroed, rescaled, or with some columns made constant, and a
    note saying which (failure reports name the transformation and its magnitude)."""
    variant = draw(st.sampled_from(_variants(field_range)))
    if variant == "zeros":
        return np.zeros_like(array), "zeroed"
    if variant == "rescaled":
        cap = _large_cap(array.dtype, field_range)
        target = draw(st.sampled_from(sorted({m for m in MAGNITUDES if m <= cap} | {cap})))
        return rescaled(array, target, field_range)
    if variant == "constant columns":
        out = array.copy()
        if out.ndim == 1:
            out[:] = out[0]
            chosen = "all"
        else:
            columns = draw(nps.arrays(np.bool_, out.shape[-1]))
            out[..., columns] = out[:1][..., columns]
            chosen = str(np.flatnonzero(columns).tolist())
        return field_range.respect(out, array), f"constant columns {chosen}"
    return array, "unchanged"


def _variant_of(array: np.ndarray, field_range: FieldRange = ANY_VALUE):
    return _described_variant(array, field_range).map(lambda made: made[0])


def _described_clean_array(
    shape: tuple[int, ...], dtype: np.dtype, field_range: FieldRange = ANY_VALUE
) -> st.SearchStrategy[tuple[np.ndarray, str]]:
    if dtype.kind == "b":
        return nps.arrays(dtype, shape).map(lambda a: (a, "random bools"))
    if dtype.kind in "iu":
        return nps.arrays(dtype, shape, elements=st.integers(0, 1)).map(lambda a: (a, "0/1 ints"))
    noise = seeds().map(
        lambda seed: np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    )
    sparse = nps.arrays(
        dtype, shape, elements=_float_elements(dtype, _large_cap(dtype, field_range))
    )
    base = st.one_of(
        noise.map(lambda a: (field_range.respect(a), "seeded noise")),
        sparse.map(lambda a: (field_range.respect(a), "sparse edge floats")),
    )

    def vary(made: tuple[np.ndarray, str]) -> st.SearchStrategy[tuple[np.ndarray, str]]:
        array, origin = made
        return _described_variant(array, field_range).map(
            lambda varied: (varied[0], f"{origin}, {varied[1]}")
        )

    return base.flatmap(vary)


def clean_arrays(
    shape: Sequence[int], dtype: Any, *, field_range: FieldRange | None = None
) -> st.SearchStrategy[np.ndarray]:
    """Finite arrays of one fixed shape and dtype, edge cases included.

    Floats: seeded standard-normal noise or sparse arrays of edge floats (zeros, signed
    zeros, subnormals, the cap), then possibly zeroed, rescaled to tiny or large
    magnitudes, or given constant columns, always within ``field_range``. Ints are 0 or 1;
    bools are arbitrary.
    """
    try:
        shape = tuple(int(n) for n in shape)
        dtype = np.dtype(dtype)
    except (TypeError, ValueError) as err:
        raise InvalidArgument(f"clean_arrays: bad shape {shape!r} or dtype {dtype!r}") from err
    return _described_clean_array(shape, dtype, _range(field_range)).map(lambda made: made[0])


@st.composite
def described_clean_batches(
    draw: st.DrawFn,
    spec: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    make_clean_batch: CleanBatchMaker | None,
    vary_fields: tuple[str, ...],
    field_ranges: Mapping[str, FieldRange],
) -> tuple[Batch, dict[str, str]]:
    """A clean batch and, per field, a note on how its values were made."""
    if make_clean_batch is None:
        made = {
            field: draw(_described_clean_array(*spec[field], field_ranges.get(field, ANY_VALUE)))
            for field in spec
        }
        return {f: a for f, (a, _) in made.items()}, {f: note for f, (_, note) in made.items()}
    batch = check_batch(
        spec, make_clean_batch(np.random.default_rng(draw(seeds()))), "make_clean_batch"
    )
    notes = {field: "from make_clean_batch" for field in spec}
    for field in vary_fields:
        batch[field], note = draw(
            _described_variant(batch[field], field_ranges.get(field, ANY_VALUE))
        )
        notes[field] = f"from make_clean_batch, {note}"
    return batch, notes


def _range(field_range: FieldRange | None) -> FieldRange:
    if field_range is None:
        return ANY_VALUE
    if not isinstance(field_range, FieldRange):
        raise InvalidArgument(f"field_range must be a FieldRange, got {type(field_range).__name__}")
    return field_range


def _spec(batch_spec: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    try:
        return normalise_spec(batch_spec)
    except ValueError as err:
        raise InvalidArgument(str(err)) from err


def _float_field_choice(
    name: str, spec: Mapping[str, tuple[tuple[int, ...], np.dtype]], given: Sequence[str] | None
) -> tuple[str, ...]:
    floats = float_fields(spec)
    chosen = floats if given is None else ((given,) if isinstance(given, str) else tuple(given))
    unknown = [field for field in chosen if field not in floats]
    if unknown:
        raise InvalidArgument(f"{name}: fields {unknown} are not float fields {list(floats)}")
    return chosen


def clean_batches(
    batch_spec: Mapping[str, Any],
    *,
    make_clean_batch: CleanBatchMaker | None = None,
    vary_fields: Sequence[str] | None = None,
    field_ranges: Mapping[str, FieldRange] | None = None,
) -> st.SearchStrategy[Batch]:
    """Clean batches of ``batch_spec``.

    Without ``make_clean_batch`` every field comes from :func:`clean_arrays`. With it,
    the batch is ``make_clean_batch(rng)`` (valid by construction) and only
    ``vary_fields`` (default: the float fields) are zeroed, rescaled or given constant
    columns. ``field_ranges`` bounds each named float field (see ``FieldRange``).
    """
    spec = _spec(batch_spec)
    fields = _float_field_choice("clean_batches: vary_fields", spec, vary_fields)
    ranges = dict(field_ranges or {})
    _float_field_choice("clean_batches: field_ranges", spec, list(ranges))
    for field_range in ranges.values():
        _range(field_range)
    return described_clean_batches(spec, make_clean_batch, fields, ranges).map(lambda made: made[0])


def clean_batch_sequences(
    batch_spec: Mapping[str, Any], steps: int, **clean: Any
) -> st.SearchStrategy[list[Batch]]:
    """``steps`` clean batches (keyword arguments as for :func:`clean_batches`)."""
    _check_steps("clean_batch_sequences", steps)
    batch = clean_batches(batch_spec, **clean)
    return st.lists(batch, min_size=steps, max_size=steps)


def _check_steps(name: str, steps: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidArgument(f"{name}: steps must be an int >= 1, got {steps!r}")


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
    spec = _spec(batch_spec)
    chosen = _float_field_choice("poisons", spec, fields)
    if not chosen:
        raise InvalidArgument("poisons: no float field to poison")
    bad_kinds = [kind for kind in kinds if kind not in NON_FINITE_KINDS + HUGE_KINDS]
    if bad_kinds or not kinds:
        raise InvalidArgument(
            f"poisons: unknown kinds {bad_kinds or list(kinds)}; "
            f"choose from {list(NON_FINITE_KINDS + HUGE_KINDS)}"
        )
    _check_steps("poisons", steps)
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
    _check_steps("poisoned_batch_sequences", steps)
    if isinstance(max_poisons, bool) or not isinstance(max_poisons, int) or max_poisons < 1:
        raise InvalidArgument(f"max_poisons must be an int >= 1, got {max_poisons!r}")
    clean = clean_batch_sequences(batch_spec, steps) if clean is None else clean
    poison = poisons(batch_spec, steps) if poison is None else poison
    drawn = st.lists(poison, min_size=1, max_size=max_poisons)
    return st.builds(
        lambda batches, chosen: PoisonedRun(apply_poisons(batches, chosen), tuple(chosen)),
        clean,
        drawn,
    )
