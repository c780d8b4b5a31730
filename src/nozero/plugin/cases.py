"""The cases a check runs a trainer on: poisoned batches or clean batches, each able to
rebuild its batches and to describe itself in a few lines (never as an array dump)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from nozero.plugin.batches import Batch, FieldRange, describe_array
from nozero.plugin.strategies import (
    ANY_VALUE,
    HUGE_KINDS,
    NON_FINITE_VALUES,
    Poison,
    apply_poisons,
    described_clean_batches,
    largest_clean_magnitude,
    poisons,
    rescaled,
    seeds,
)
from nozero.plugin.trainer import TrainerUnderTest

# Words in a clean field's note that say its values were pushed toward an edge.
TRANSFORMATIONS = ("zeroed", "rescaled", "constant columns", "sparse edge floats")


def batch_name(trainer: TrainerUnderTest, index: int) -> str:
    """``batches[i]``, and which optimizer step it belongs to when steps accumulate."""
    k = trainer.steps_per_update
    if k == 1:
        return f"batches[{index}]"
    return f"batches[{index}] (optimizer step {index // k}, micro-batch {index % k + 1} of {k})"


@dataclass(frozen=True, repr=False)
class PoisonedCase:
    """Clean batches from ``trainer.clean_batches(seed)`` with ``poisons`` written in."""

    seed: int
    poisons: tuple[Poison, ...]

    @property
    def first_batch(self) -> int:
        return min(poison.step for poison in self.poisons)

    def first_step(self, trainer: TrainerUnderTest) -> int:
        """The optimizer step that first sees a poison: where a correct trainer stops."""
        return self.first_batch // trainer.steps_per_update

    def batches(self, trainer: TrainerUnderTest, steps: int) -> list[Batch]:
        return apply_poisons(trainer.clean_batches(self.seed, steps), self.poisons)

    @property
    def first_poison(self) -> Poison:
        return min(self.poisons, key=lambda poison: poison.step)

    def moved_to(self, batch: int, index: tuple[int, ...] | None = None) -> PoisonedCase:
        """The same first poison, alone, in another batch (or at another element)."""
        first = self.first_poison
        where = first.index if index is None else index
        moved = Poison(first.kind, first.field, where, first.value, batch)
        return PoisonedCase(self.seed, (moved,))

    def describe(self, trainer: TrainerUnderTest) -> str:
        lines = []
        for poison in self.poisons:
            where = ", ".join(str(i) for i in poison.index)
            lines.append(
                f"poison: {poison.kind} ({poison.value!r}) at "
                f"{batch_name(trainer, poison.step)}[{poison.field!r}][{where}]"
            )
        lines.append(f"clean values elsewhere: trainer.clean_batches(seed={self.seed})")
        masks = sorted({p.field for p in self.poisons if _holds_zeros_and_ones(trainer, p.field)})
        for name in masks:
            lines.append(_MASK_NOTE.format(name=name))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"PoisonedCase(seed={self.seed}, poisons={list(self.poisons)!r})"


@dataclass(frozen=True, repr=False)
class CleanCase:
    """Clean batches drawn whole, with a note per field on how its values were made."""

    clean_batches: tuple[Batch, ...]
    notes: tuple[dict[str, str], ...]

    def batches(self, trainer: TrainerUnderTest, steps: int) -> list[Batch]:
        return list(self.clean_batches)

    def transformed(self, up_to: int | None = None) -> list[tuple[int, str, str, float]]:
        """``(batch, field, note, max |x|)`` of every float field that was not left as
        made, in batches ``0..up_to``, largest magnitude first."""
        found = []
        for index, (batch, notes) in enumerate(zip(self.clean_batches, self.notes, strict=True)):
            if up_to is not None and index > up_to:
                break
            for name, note in notes.items():
                array = batch[name]
                if array.dtype.kind == "f" and any(word in note for word in TRANSFORMATIONS):
                    found.append((index, name, note, float(np.abs(array).max())))
        return sorted(found, key=lambda entry: -entry[3])

    def describe(self, trainer: TrainerUnderTest) -> str:
        lines = ["clean batches (no poison):"]
        for index, (batch, notes) in enumerate(zip(self.clean_batches, self.notes, strict=True)):
            for name, array in batch.items():
                lines.append(
                    f"  {batch_name(trainer, index)}[{name!r}]: {describe_array(array)} "
                    f"({notes[name]})"
                )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CleanCase({len(self.clean_batches)} batches)"


_MASK_NOTE = (
    "note: {name!r} holds only 0 and 1 in clean batches (a mask?). A NaN or Inf there "
    "reaches the loss only where the mask multiplies values (x * mask); a guard that missed "
    "it may hide a real silent zeroing (masked pooling with jnp.where). If masks are never "
    "non-finite in your data, declare it: TrainerUnderTest(poison_fields=[the other float "
    "fields]), or TrainerUnderTest.from_example(..., poison_fields=[...])"
)


def _holds_zeros_and_ones(trainer: TrainerUnderTest, name: str) -> bool:
    values = trainer.clean_batches(0, 1)[0][name]
    return bool(np.isin(values, (0.0, 1.0)).all())


def poison_value(kind: str, dtype: np.dtype) -> float:
    if kind in HUGE_KINDS:
        top = float(np.finfo(dtype).max)
        return -top if kind == "-huge" else top
    return NON_FINITE_VALUES[kind]


def poisonable_batches(trainer: TrainerUnderTest, steps: int) -> int:
    """How many leading batches may be poisoned: those whose optimizer step leaves the
    whole ``check_every`` window inside the run, so a periodic check can answer."""
    return trainer.batches_per_run(max(1, steps - trainer.check_every + 1))


def run_steps(trainer: TrainerUnderTest, steps: int) -> int:
    """Optimizer steps per run: at least ``check_every + 1``, so a trainer checking every
    N steps checks inside the run, and is seen to be late when it is."""
    return max(steps, trainer.check_every + 1)


def edge_poisons(kinds: Sequence[str]) -> Callable[[TrainerUnderTest, int], list[PoisonedCase]]:
    """Each poison kind in each poisonable field in the first and the last batch."""

    def explicit(trainer: TrainerUnderTest, steps: int) -> list[PoisonedCase]:
        cases = []
        last = poisonable_batches(trainer, steps) - 1
        for kind in kinds:
            for name in trainer.poison_fields:
                shape, dtype = trainer.batch_spec[name]
                for batch in sorted({0, last}):
                    poison = Poison(kind, name, (0,) * len(shape), poison_value(kind, dtype), batch)
                    cases.append(PoisonedCase(0, (poison,)))
        return cases

    return explicit


def poisoned_cases(kinds: Sequence[str], max_poisons: int):
    def cases(trainer: TrainerUnderTest, steps: int) -> st.SearchStrategy[PoisonedCase]:
        batches = poisonable_batches(trainer, steps)
        poison = poisons(trainer.batch_spec, batches, fields=trainer.poison_fields, kinds=kinds)
        chosen = st.lists(poison, min_size=1, max_size=max_poisons).map(tuple)
        return st.builds(PoisonedCase, seeds(), chosen)

    return cases


def clean_cases(trainer: TrainerUnderTest, steps: int) -> st.SearchStrategy[CleanCase]:
    one = described_clean_batches(
        trainer.batch_spec,
        trainer.make_clean_batch,
        tuple(trainer.vary_fields),
        trainer.field_ranges,
    )
    count = trainer.batches_per_run(steps)
    drawn = st.lists(one, min_size=count, max_size=count)
    return drawn.map(
        lambda made: CleanCase(tuple(b for b, _ in made), tuple(notes for _, notes in made))
    )


def clean_explicit(trainer: TrainerUnderTest, steps: int) -> list[CleanCase]:
    """The trainer's own clean batches; the same with every varied field zeroed (where its
    range allows zeros); and with every varied float field at the largest clean magnitude.

    Tried on every run, so a derandomized search (Hypothesis's profile under ``CI``) still
    meets both edges, not only when its draws happen to reach them."""
    plain = trainer.clean_batches(0, steps)
    made = {name: "as trainer.clean_batches makes it" for name in trainer.batch_spec}
    cases = [CleanCase(tuple(plain), tuple(made for _ in plain))]
    ranges = trainer.field_ranges
    zeroable = [name for name in trainer.vary_fields if ranges.get(name, ANY_VALUE).allows_zeros()]
    if zeroable:
        cases.append(_edited(plain, made, {name: _zeroed for name in zeroable}))
    floats = [name for name in trainer.vary_fields if trainer.batch_spec[name][1].kind == "f"]
    if floats:
        cases.append(_edited(plain, made, {name: _at_largest(ranges, name) for name in floats}))
    return cases


Edit = Callable[[np.ndarray], tuple[np.ndarray, str]]


def _zeroed(array: np.ndarray) -> tuple[np.ndarray, str]:
    return np.zeros_like(array), "zeroed"


def _at_largest(ranges: dict[str, FieldRange], name: str) -> Edit:
    field_range = ranges.get(name, ANY_VALUE)
    return lambda array: rescaled(
        array, largest_clean_magnitude(array.dtype, field_range), field_range
    )


def _edited(plain: list[Batch], made: dict[str, str], edits: dict[str, Edit]) -> CleanCase:
    """``plain`` with ``edits`` applied to their fields in every batch, notes to match."""
    batches, notes = [], []
    for batch in plain:
        done = {name: edits[name](array) for name, array in batch.items() if name in edits}
        batches.append({name: done[name][0] if name in done else a for name, a in batch.items()})
        notes.append({**made, **{name: note for name, (_, note) in done.items()}})
    return CleanCase(tuple(batches), tuple(notes))
