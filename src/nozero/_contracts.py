"""The four contracts: what a trainer is given, what it must do, and how a breach reads.

Framework-free and pytest-free: a contract draws cases (Hypothesis strategies from
``nozero.strategies``), runs the trainer on them (:func:`observe`) and judges the outcome,
returning ``None`` or a sentence saying what the trainer did wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from nozero._batches import Batch, describe_array
from nozero.contract import NonFiniteError, parse_message
from nozero.strategies import (
    HUGE_KINDS,
    NON_FINITE_KINDS,
    NON_FINITE_VALUES,
    Poison,
    apply_poisons,
    clean_batch_sequences,
    poisons,
    seeds,
)
from nozero.testing import TrainerUnderTest

History = tuple[tuple[float, float], ...]
DOCUMENTED = (
    "the documented error (nozero.NonFiniteError, or a RuntimeError with its exact message)"
)


@dataclass(frozen=True)
class PoisonedCase:
    """Clean batches from ``trainer.clean_batches(seed)`` with ``poisons`` written in."""

    seed: int
    poisons: tuple[Poison, ...]

    @property
    def first_step(self) -> int:
        return min(poison.step for poison in self.poisons)

    def batches(self, trainer: TrainerUnderTest, steps: int) -> list[Batch]:
        return apply_poisons(trainer.clean_batches(self.seed, steps), self.poisons)

    def describe(self) -> str:
        lines = [f"poison: {poison.describe()}" for poison in self.poisons]
        lines.append(f"clean values elsewhere: trainer.clean_batches(seed={self.seed})")
        return "\n".join(lines)


@dataclass(frozen=True)
class CleanCase:
    """Clean batches, drawn whole (their values are the point of the case)."""

    clean_batches: tuple[Batch, ...]

    def batches(self, trainer: TrainerUnderTest, steps: int) -> list[Batch]:
        return list(self.clean_batches)

    def describe(self) -> str:
        lines = ["clean batches (no poison):"]
        for step, batch in enumerate(self.clean_batches):
            for field, array in batch.items():
                lines.append(f"  batches[{step}][{field!r}]: {describe_array(array)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Outcome:
    """What ``run`` did: returned (with its history, if any) or raised."""

    returned: bool
    history: History | None = None
    malformed: str | None = None
    error: Exception | None = None
    halt: tuple[int, float, float] | None = None

    def first_non_finite(self) -> tuple[int, float, float] | None:
        for step, (loss, grad_norm) in enumerate(self.history or ()):
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                return step, loss, grad_norm
        return None

    def describe(self) -> str:
        if self.halt is not None:
            step, loss, grad_norm = self.halt
            return (
                f"raised the documented error at step {step} "
                f"(loss={loss!r}, grad_norm={grad_norm!r})"
            )
        if self.error is not None:
            message = str(self.error)
            if len(message) > 300:
                message = message[:300] + "…"
            return f"raised {type(self.error).__qualname__}: {message}"
        if self.history is None:
            return "returned normally (no history returned)"
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


def _as_history(returned: object) -> tuple[History | None, str | None]:
    if returned is None:
        return None, None
    try:
        return tuple((float(loss), float(norm)) for loss, norm in returned), None
    except (TypeError, ValueError):
        kind = type(returned).__name__
        return None, f"run returned a {kind}, not None or a sequence of (loss, grad_norm) pairs"


def observe(trainer: TrainerUnderTest, batches: list[Batch]) -> Outcome:
    """Run the trainer once and record how it ended."""
    try:
        returned = trainer.run(batches)
    except Exception as error:  # the judges decide which exceptions are acceptable
        return Outcome(returned=False, error=error, halt=_documented_halt(error))
    history, malformed = _as_history(returned)
    return Outcome(returned=True, history=history, malformed=malformed)


def _continuation_hints(outcome: Outcome, poisoned_step: int, steps: int) -> str:
    """Why a normal return after poison looks the way it does, from the history."""
    history = outcome.history
    if history is None:
        return ""
    hints = []
    if len(history) < steps:
        hints.append(f"the history has {len(history)} entries for {steps} batches: steps skipped")
    elif poisoned_step < len(history):
        loss, grad_norm = history[poisoned_step]
        if not math.isfinite(loss) and math.isfinite(grad_norm):
            hints.append(
                f"at step {poisoned_step} the loss is {loss!r} but the grad norm is "
                f"{grad_norm!r}: the gradient was made finite (zeroed, nan_to_num)"
            )
        elif math.isfinite(loss) and math.isfinite(grad_norm):
            hints.append(
                f"step {poisoned_step} left no non-finite trace in the history "
                "(skipped, masked or replaced)"
            )
    bad = outcome.first_non_finite()
    if bad is not None and bad[0] < len(history) - 1:
        hints.append(f"training went on for {len(history) - 1 - bad[0]} steps after step {bad[0]}")
    return "".join(f"\n  - {hint}" for hint in hints)


def _wrong_error(outcome: Outcome) -> str:
    return f"{outcome.describe()} — expected {DOCUMENTED}"


def _finite_report(halt: tuple[int, float, float]) -> str | None:
    step, loss, grad_norm = halt
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return (
            f"raised the documented error at step {step} with loss={loss!r} and "
            f"grad_norm={grad_norm!r}, both finite: it must report the non-finite values"
        )
    return None


def judge_halts(
    case: PoisonedCase, outcome: Outcome, trainer: TrainerUnderTest, steps: int
) -> str | None:
    poisoned, every = case.first_step, trainer.check_every
    if outcome.halt is None:
        if outcome.returned:
            hints = _continuation_hints(outcome, poisoned, steps)
            return f"never raised: {outcome.describe()}{hints}"
        return _wrong_error(outcome)
    step = outcome.halt[0]
    if not poisoned <= step < poisoned + every:
        window = f"[{poisoned}, {poisoned + every})"
        late = " (detected late: is it checking less often than it declares?)"
        return (
            f"reported step {step}, but the poison is at step {poisoned} and "
            f"check_every={every} promises a step in {window}"
            + (late if step >= poisoned + every else " (before the poison)")
        )
    return _finite_report(outcome.halt)


def judge_overflow(
    case: PoisonedCase, outcome: Outcome, trainer: TrainerUnderTest, steps: int
) -> str | None:
    if outcome.halt is not None:  # an overflowing update may halt with finite values
        if outcome.halt[0] < case.first_step:
            return f"false alarm: {outcome.describe()}, before the poisoned step {case.first_step}"
        return None
    if not outcome.returned:
        return f"{outcome.describe()} — expected {DOCUMENTED} or a finite history"
    if outcome.first_non_finite() is not None:
        return (
            f"{outcome.describe()} — a non-finite loss or grad norm must raise "
            "the documented error, not be returned"
        )
    return None


def judge_no_false_alarm(
    case: CleanCase, outcome: Outcome, trainer: TrainerUnderTest, steps: int
) -> str | None:
    if outcome.halt is not None:
        return f"false alarm: {outcome.describe()} on clean, finite batches"
    if not outcome.returned:
        return f"{outcome.describe()} on clean, finite batches"
    if outcome.first_non_finite() is not None:
        return f"{outcome.describe()} without raising: it continued past a non-finite value"
    if outcome.history is not None and len(outcome.history) != steps:
        return (
            f"returned {len(outcome.history)} history entries for {steps} batches "
            "(one optimizer step per batch)"
        )
    return None


def judge_never_continue(
    case: PoisonedCase, outcome: Outcome, trainer: TrainerUnderTest, steps: int
) -> str | None:
    poisoned, every = case.first_step, trainer.check_every
    if outcome.returned:
        hints = _continuation_hints(outcome, poisoned, steps)
        return f"returned normally after the poison at step {poisoned}: {outcome.describe()}{hints}"
    if outcome.halt is not None and outcome.halt[0] >= poisoned + every:
        return (
            f"continued past the poisoned step {poisoned} (check_every={every}) and "
            f"stopped only at step {outcome.halt[0]}"
        )
    return None


Judge = Callable[..., str | None]


@dataclass(frozen=True)
class Contract:
    """One promise, the cases that test it and the judge of each outcome."""

    name: str
    promise: str
    cases: Callable[[TrainerUnderTest, int], st.SearchStrategy]
    explicit: Callable[[TrainerUnderTest, int], Sequence]
    judge: Judge


def _poison_value(kind: str, dtype: np.dtype) -> float:
    if kind in HUGE_KINDS:
        top = float(np.finfo(dtype).max)
        return -top if kind == "-huge" else top
    return NON_FINITE_VALUES[kind]


def _edge_poisons(kinds: Sequence[str]) -> Callable[[TrainerUnderTest, int], list[PoisonedCase]]:
    """Each poison kind in each poisonable field at the first and the last step."""

    def explicit(trainer: TrainerUnderTest, steps: int) -> list[PoisonedCase]:
        cases = []
        for kind in kinds:
            for field in trainer.poison_fields:
                shape, dtype = trainer.batch_spec[field]
                for step in sorted({0, steps - 1}):
                    value = _poison_value(kind, dtype)
                    poison = Poison(kind, field, (0,) * len(shape), value, step)
                    cases.append(PoisonedCase(0, (poison,)))
        return cases

    return explicit


def _poisoned_cases(kinds: Sequence[str], max_poisons: int):
    def cases(trainer: TrainerUnderTest, steps: int) -> st.SearchStrategy[PoisonedCase]:
        poison = poisons(trainer.batch_spec, steps, fields=trainer.poison_fields, kinds=kinds)
        chosen = st.lists(poison, min_size=1, max_size=max_poisons).map(tuple)
        return st.builds(PoisonedCase, seeds(), chosen)

    return cases


def _clean_cases(trainer: TrainerUnderTest, steps: int) -> st.SearchStrategy[CleanCase]:
    batches = clean_batch_sequences(
        trainer.batch_spec,
        steps,
        make_clean_batch=trainer.make_clean_batch,
        vary_fields=trainer.vary_fields,
    )
    return batches.map(lambda drawn: CleanCase(tuple(drawn)))


def _clean_explicit(trainer: TrainerUnderTest, steps: int) -> list[CleanCase]:
    """The trainer's own clean batches, and the same with every varied field zeroed."""
    plain = trainer.clean_batches(0, steps)
    zeroed = [
        {field: np.zeros_like(a) if field in trainer.vary_fields else a for field, a in b.items()}
        for b in plain
    ]
    return [CleanCase(tuple(plain)), CleanCase(tuple(zeroed))]


CONTRACTS: tuple[Contract, ...] = (
    Contract(
        name="halts",
        promise="a NaN, +Inf or -Inf in any poisonable input raises the documented error "
        "at the poisoned step (within check_every), reporting the non-finite value",
        cases=_poisoned_cases(NON_FINITE_KINDS, max_poisons=1),
        explicit=_edge_poisons(NON_FINITE_KINDS),
        judge=judge_halts,
    ),
    Contract(
        name="overflow",
        promise="huge finite inputs (near the dtype's maximum) either raise the documented "
        "error or leave every returned loss and grad norm finite",
        cases=_poisoned_cases(HUGE_KINDS, max_poisons=1),
        explicit=_edge_poisons(HUGE_KINDS),
        judge=judge_overflow,
    ),
    Contract(
        name="no_false_alarm",
        promise="clean, finite batches (zeros, constant columns, tiny and large magnitudes "
        "included) never raise",
        cases=_clean_cases,
        explicit=_clean_explicit,
        judge=judge_no_false_alarm,
    ),
    Contract(
        name="never_continue",
        promise="after a poisoned step the run never returns normally and never trains past "
        "the first poisoned step",
        cases=_poisoned_cases(NON_FINITE_KINDS, max_poisons=3),
        explicit=_edge_poisons(NON_FINITE_KINDS),
        judge=judge_never_continue,
    ),
)
