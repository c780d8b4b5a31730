"""The four checks of the non-finite contract: what a trainer is given, what it must do,
and how a breach reads. Framework-free and pytest-free: a check draws cases, runs the
trainer on them (:func:`nozero.plugin.outcome.observe`) and judges the outcome, returning
``None`` or a sentence saying what the trainer did wrong."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from nozero.plugin.cases import (
    CleanCase,
    PoisonedCase,
    batch_name,
    clean_cases,
    clean_explicit,
    edge_poisons,
    poisoned_cases,
)
from nozero.plugin.outcome import WHAT_TO_RETURN, Outcome, observe
from nozero.plugin.strategies import HUGE_KINDS, NON_FINITE_KINDS
from nozero.plugin.trainer import TrainerUnderTest

DOCUMENTED = (
    "the documented error (nozero.NonFiniteError, or a RuntimeError with its exact message)"
)


@dataclass(frozen=True)
class Trial:
    """One trainer under one check's settings; judges may run it again to tell causes apart."""

    trainer: TrainerUnderTest
    steps: int
    seconds: float
    quiet: bool = True

    def observe(self, case: PoisonedCase | CleanCase) -> Outcome:
        batches = case.batches(self.trainer, self.steps)
        return observe(self.trainer, batches, self.seconds, quiet=self.quiet)


def _continuation_hints(outcome: Outcome, poisoned_step: int, steps: int) -> str:
    """Why a normal return after poison looks the way it does, from the history."""
    history = outcome.history
    if history is None:
        if outcome.returned_nothing:
            return f"\n  - it returned nothing: {WHAT_TO_RETURN}"
        if outcome.state_type is not None and outcome.bad_array is None:
            return (
                f"\n  - step {poisoned_step} left no non-finite trace in what it returned "
                "(skipped, masked or replaced)"
            )
        return ""
    hints = []
    if len(history) < steps:
        hints.append(f"the history has {len(history)} entries for {steps} steps: steps skipped")
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
    return f"{outcome.describe()}\n  — expected {DOCUMENTED}"


def _finite_report(halt: tuple[int, float, float]) -> str | None:
    step, loss, grad_norm = halt
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return (
            f"raised the documented error at step {step} with loss={loss!r} and "
            f"grad_norm={grad_norm!r}, both finite: it must report the non-finite values"
        )
    return None


def _accumulation_guess(reported: int, batch: int) -> int | None:
    """The smallest k >= 2 for which ``reported`` is the optimizer step of ``batch``."""
    for k in range(2, batch + 2):
        if batch // k == reported:
            return k
    return None


def _misplaced_halt(case: PoisonedCase, reported: int, trial: Trial, what: str) -> str:
    """Why a halt falls outside ``[k, k + check_every)``, naming the likely mistake:
    step numbering from 1, micro-batches counted as steps (or the reverse), or a check
    that comes late."""
    trainer = trial.trainer
    every, per_update = trainer.check_every, trainer.steps_per_update
    batch = case.first_batch
    poisoned = case.first_step(trainer)
    window = f"[{poisoned}, {poisoned + every})"
    head = (
        f"reported step {reported}, but {what} is in {batch_name(trainer, batch)}, "
        f"optimizer step {poisoned}, and check_every={every} promises a step in {window}"
    )
    if per_update > 1 and reported == batch != poisoned:
        return (
            f"{head}: step-unit mismatch: it reported the micro-batch index {batch}; with "
            f"steps_per_update={per_update} the documented step is the optimizer step "
            f"(batch index // {per_update} = {poisoned})"
        )
    if reported < poisoned:
        guess = _accumulation_guess(reported, batch) if per_update == 1 else None
        if guess is not None:
            return (
                f"{head}: step-unit mismatch: step {reported} is the optimizer step of batch "
                f"{batch} if each optimizer step takes {guess} batches (gradient "
                f"accumulation); declare TrainerUnderTest(steps_per_update={guess}) so "
                "'step' means optimizer step here too"
            )
        return f"{head}: it halted before the poisoned step, on clean batches"
    last = trainer.batches_per_run(trial.steps) - 1
    probe = trial.observe(case.moved_to(last)) if reported == poisoned + 1 else None
    if reported == poisoned + 1 and probe is not None and probe.halt is not None:
        if probe.halt[0] == trial.steps:
            return (
                f"{head}: off-by-one: it numbers steps from 1 (the same poison in the last "
                f"step, {trial.steps - 1}, is reported as step {trial.steps}, which does not "
                "exist); the documented step is the 0-based index of the optimizer step"
            )
    late = reported - poisoned - every + 1
    return (
        f"{head}: detected {late} step{'s' if late > 1 else ''} late: is it checking less "
        "often than it declares, or checking the loss but not the gradient?"
    )


def _halt_in_window(case: PoisonedCase, outcome: Outcome, trial: Trial, what: str) -> str | None:
    assert outcome.halt is not None
    poisoned = case.first_step(trial.trainer)
    if poisoned <= outcome.halt[0] < poisoned + trial.trainer.check_every:
        return None
    return _misplaced_halt(case, outcome.halt[0], trial, what)


def judge_halts(case: PoisonedCase, outcome: Outcome, trial: Trial) -> str | None:
    if outcome.halt is None:
        if outcome.returned:
            hints = _continuation_hints(outcome, case.first_step(trial.trainer), trial.steps)
            return f"never raised: {outcome.describe()}{hints}"
        return _wrong_error(outcome)
    misplaced = _halt_in_window(case, outcome, trial, "the poison")
    return misplaced or _finite_report(outcome.halt)


def judge_overflow(case: PoisonedCase, outcome: Outcome, trial: Trial) -> str | None:
    if outcome.halt is not None:  # an overflowing update may halt with finite values
        return _halt_in_window(case, outcome, trial, "the huge value")
    if not outcome.returned:
        return f"{outcome.describe()}\n  — expected {DOCUMENTED} or a finite result"
    if outcome.returned_nothing:
        return (
            "returned normally after a huge value, returning nothing: nothing shows whether "
            f"its updates stayed finite. For the overflow check to see it, {WHAT_TO_RETURN}"
        )
    if outcome.continued_non_finite:
        return (
            f"{outcome.describe()}\n  — a non-finite loss, grad norm or parameter must raise "
            "the documented error, not be returned"
        )
    return None


def _remedy(name: str, note: str, magnitude: float) -> str:
    """How to declare the field's valid values, or what to fix if the values are valid."""
    if "zeroed" in note or magnitude == 0.0:
        declare = f"field_ranges={{{name!r}: FieldRange(nonzero_per_row=1)}}"
        fix = "guard the division or log that sees all zeros (a norm or std of 0)"
    elif "constant columns" in note:
        declare = f"vary_fields without {name!r}"
        fix = "guard the division by a column's spread (a std of 0)"
    elif magnitude >= 1.0:
        declare = f"field_ranges={{{name!r}: FieldRange(max_magnitude={magnitude / 1000:g})}}"
        fix = "clip gradients (optax.clip_by_global_norm) or normalise the inputs"
    else:
        declare = f"vary_fields without {name!r}"
        fix = "guard the division by a tiny norm (add an epsilon)"
    return (
        f"\n  If such values of {name!r} are not valid data, declare it: TrainerUnderTest("
        f"{declare}). If they are valid, the trainer diverges on valid data: {fix}."
    )


def _clean_facts(case: CleanCase, up_to: int, trainer: TrainerUnderTest) -> str:
    """Which clean fields were pushed to an edge before the halt, and how to respond."""
    transformed = case.transformed(up_to)
    if not transformed:
        return (
            "\n  - the batches are the trainer's own clean batches, untransformed: check "
            "make_clean_batch, or the trainer's numerics (a log or division of zero?)"
        )
    lines = [
        f"{batch_name(trainer, batch)}[{name!r}]: {note} (max |x| {magnitude:.3g})"
        for batch, name, note, magnitude in transformed[:3]
    ]
    _, name, note, magnitude = transformed[0]
    return "".join(f"\n  - {line}" for line in lines) + _remedy(name, note, magnitude)


def judge_no_false_alarm(case: CleanCase, outcome: Outcome, trial: Trial) -> str | None:
    trainer, steps = trial.trainer, trial.steps
    if outcome.halt is not None:
        step, loss, grad_norm = outcome.halt
        last_batch = (step + 1) * trainer.steps_per_update - 1
        facts = _clean_facts(case, last_batch, trainer)
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return (
                f"false alarm: {outcome.describe()} on clean, finite batches, with a finite "
                f"loss and grad norm{facts}"
            )
        return f"diverged on clean, finite batches: {outcome.describe()}; before it:{facts}"
    if not outcome.returned:
        return f"{outcome.describe()}\n  on clean, finite batches"
    if outcome.continued_non_finite:
        return f"{outcome.describe()} without raising: it continued past a non-finite value"
    if outcome.history is not None and len(outcome.history) != steps:
        return (
            f"returned {len(outcome.history)} history entries for {steps} optimizer steps "
            f"({trainer.batches_per_run(steps)} batches, steps_per_update="
            f"{trainer.steps_per_update}): one (loss, grad_norm) per optimizer step"
        )
    return None


def judge_never_continue(case: PoisonedCase, outcome: Outcome, trial: Trial) -> str | None:
    poisoned, every = case.first_step(trial.trainer), trial.trainer.check_every
    if outcome.returned:
        hints = _continuation_hints(outcome, poisoned, trial.steps)
        return f"returned normally after the poison at step {poisoned}: {outcome.describe()}{hints}"
    if outcome.halt is None:
        return _wrong_error(outcome)
    if outcome.halt[0] >= poisoned + every:
        return (
            f"continued past the poisoned step {poisoned} (check_every={every}) and "
            f"stopped only at step {outcome.halt[0]}"
        )
    return None


Judge = Callable[..., str | None]


@dataclass(frozen=True)
class Check:
    """One clause of the contract, the cases that test it and the judge of each outcome."""

    name: str
    promise: str
    cases: Callable[[TrainerUnderTest, int], st.SearchStrategy]
    explicit: Callable[[TrainerUnderTest, int], Sequence]
    judge: Judge
    poisoned: bool  # floating-point warnings of its runs are the check's own doing


CHECKS: tuple[Check, ...] = (
    Check(
        name="halts",
        promise="a NaN, +Inf or -Inf in any poisonable input raises the documented error "
        "at the poisoned step (within check_every), reporting the non-finite value",
        cases=poisoned_cases(NON_FINITE_KINDS, max_poisons=1),
        explicit=edge_poisons(NON_FINITE_KINDS),
        judge=judge_halts,
        poisoned=True,
    ),
    Check(
        name="overflow",
        promise="huge finite inputs (near the dtype's maximum) either raise the documented "
        "error at the poisoned step (within check_every) or leave everything returned finite",
        cases=poisoned_cases(HUGE_KINDS, max_poisons=1),
        explicit=edge_poisons(HUGE_KINDS),
        judge=judge_overflow,
        poisoned=True,
    ),
    Check(
        name="no_false_alarm",
        promise="clean, finite batches (zeros, constant columns, tiny and large magnitudes "
        "included, within each field's declared range) never raise",
        cases=clean_cases,
        explicit=clean_explicit,
        judge=judge_no_false_alarm,
        poisoned=False,
    ),
    Check(
        name="never_continue",
        promise="after a poisoned step the run never returns normally, never trains past "
        "the first poisoned step, and raises nothing but the documented error",
        cases=poisoned_cases(NON_FINITE_KINDS, max_poisons=3),
        explicit=edge_poisons(NON_FINITE_KINDS),
        judge=judge_never_continue,
        poisoned=True,
    ),
)
