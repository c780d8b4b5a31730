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
    poisonable_batches,
    poisoned_cases,
)
from nozero.plugin.outcome import WHAT_TO_RETURN, Outcome, observe
from nozero.plugin.returned import finite
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
    watch_checks: bool = False

    def observe(self, case: PoisonedCase | CleanCase) -> Outcome:
        batches = case.batches(self.trainer, self.steps)
        return observe(
            self.trainer, batches, self.seconds, quiet=self.quiet, watch_checks=self.watch_checks
        )


KERAS_QUIET_STOP = (
    "Keras' fit returned its History after a non-finite loss: no callback halted it, or one "
    "stopped it quietly (keras.callbacks.TerminateOnNaN ends fit after the bad step's update, "
    "without raising); raise nozero.NonFiniteError(batch, loss, grad_norm) from a callback's "
    "on_train_batch_end (see the Keras recipe)"
)


def _continuation_hints(outcome: Outcome, poisoned_step: int, trial: Trial) -> str:
    """Why a normal return after poison looks the way it does, from the history."""
    history, steps = outcome.history, trial.steps
    if history is None:
        if outcome.returned_nothing:
            return f"\n  - it returned nothing: {WHAT_TO_RETURN}"
        if outcome.state_type is not None and outcome.bad_array is None:
            return (
                f"\n  - step {poisoned_step} left no non-finite trace in what it returned "
                "(skipped, masked or replaced)"
            )
        return _periodic_hint(trial)
    entries, hints = history.entries, []
    per_step = history.unit == "step"
    if per_step and len(entries) < steps:
        hints.append(f"the history has {len(entries)} entries for {steps} steps: steps skipped")
    elif per_step and poisoned_step < len(entries):
        loss, grad_norm = entries[poisoned_step]
        if not math.isfinite(loss) and grad_norm is not None and math.isfinite(grad_norm):
            hints.append(
                f"at step {poisoned_step} the loss is {loss!r} but the grad norm is "
                f"{grad_norm!r}: the gradient was made finite (zeroed, nan_to_num)"
            )
        elif finite(loss) and finite(grad_norm):
            hints.append(
                f"step {poisoned_step} left no non-finite trace in the history "
                "(skipped, masked or replaced)"
            )
    bad = outcome.first_non_finite()
    if bad is not None and per_step and bad[0] < len(entries) - 1:
        hints.append(f"training went on for {len(entries) - 1 - bad[0]} steps after step {bad[0]}")
    if bad is not None and history.unit == "epoch":  # Keras' fit ended with a History
        hints.append(KERAS_QUIET_STOP)
    return "".join(f"\n  - {hint}" for hint in hints) + _periodic_hint(trial)


def _periodic_hint(trial: Trial) -> str:
    every = trial.trainer.check_every
    return (
        f"\n  - if it checks only every N steps, its check may not have run in this "
        f"{trial.steps}-step run: declare TrainerUnderTest(check_every=N) (runs then take "
        "N + 1 steps or more, and the check must come within N steps of the poison)"
        if every == 1
        else ""
    )


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
        constant = _constant_step(case, reported, trial)
        if constant:
            return f"{head}: {constant}"
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
    replica = _one_replica_hint(case, trial)
    cause = replica or (
        "is it checking less often than it declares, or checking the loss but not the gradient?"
    )
    return f"{head}: detected {late} step{'s' if late > 1 else ''} late: {cause}"


def _constant_step(case: PoisonedCase, reported: int, trial: Trial) -> str | None:
    """The same step reported for a poison in another step: a counter that never moves."""
    first, last = 0, poisonable_batches(trial.trainer, trial.steps) - 1
    other = last if case.first_batch != last else first
    if other == case.first_batch:
        return None
    probe = trial.observe(case.moved_to(other))
    if probe.halt is None or probe.halt[0] != reported:
        return None
    step = other // trial.trainer.steps_per_update
    return (
        f"it reports step {reported} whatever step the poison is in (step {reported} again "
        f"for the same poison in optimizer step {step}): the reported step is a constant. Is "
        "its step counter created, or reset to 0, on every call of the step function, or "
        "never incremented? Report the 0-based index of the optimizer step in this run"
    )


def _one_replica_hint(case: PoisonedCase, trial: Trial) -> str:
    """Whether the same poison at element 0 is caught in time: a check that reads one
    replica's or one device's values only, when the poison sat in another's rows."""
    poison = case.first_poison
    if not any(poison.index):
        return ""
    zeros = (0,) * len(poison.index)
    probe = trial.observe(case.moved_to(poison.step, zeros))
    if probe.halt is None:
        return ""
    step = case.first_step(trial.trainer)
    if not step <= probe.halt[0] < step + trial.trainer.check_every:
        return ""
    where = ", ".join(map(str, poison.index))
    return (
        f"the same poison at [{', '.join(map(str, zeros))}] is caught at step {probe.halt[0]}, "
        f"at [{where}] it is not: does it check one replica's or one device's values only "
        "(device 0's loss or grad norm, the first shard)? Under data parallelism every "
        "replica's flag must be reduced (jax.lax.pmax or psum over the device axis, or the "
        "global loss and grad norm) before the check"
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
            hints = _continuation_hints(outcome, case.first_step(trial.trainer), trial)
            replica = _one_replica_hint(case, trial)
            hints += f"\n  - {replica}" if replica else ""
            return f"never raised: {outcome.describe()}{hints}"
        return _wrong_error(outcome)
    misplaced = _halt_in_window(case, outcome, trial, "the poison")
    return misplaced or _finite_report(outcome.halt)


def _skipped_steps(outcome: Outcome, trial: Trial) -> str | None:
    """A per-step history shorter after a huge value than after a clean run: the steps
    whose values were not finite were left out. (The clean run is made only then.)"""
    history = outcome.history
    if history is None or history.unit != "step" or len(history.entries) >= trial.steps:
        return None
    clean = trial.observe(clean_explicit(trial.trainer, trial.steps)[0]).history
    if clean is None or len(clean.entries) <= len(history.entries):
        return None
    return (
        f"{outcome.describe()}, after a huge value, where a run on clean batches returns "
        f"{len(clean.entries)}: steps skipped. A step whose loss or grad norm is not finite "
        f"must raise {DOCUMENTED}, not be left out"
    )


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
    skipped = _skipped_steps(outcome, trial)
    if skipped:
        return skipped
    if outcome.history is None and not set(range(trial.steps)) <= outcome.checked_steps:
        return (
            f"{outcome.describe()}, after a huge value, but no per-step history: finite "
            "parameters prove nothing about the losses along the way (an Inf loss that a "
            "guard let through can leave Adam's parameters finite, its updates zeroed). "
            f"So that the overflow check can vouch for it, {WHAT_TO_RETURN.split(', or')[0]}, "
            "or check every step with nozero.check_finite(step, loss, grad_norm)"
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
        fix = (
            "clip gradients (optax.clip_by_global_norm, torch.nn.utils.clip_grad_norm_, "
            "nozero.torch.Guard(max_grad_norm=...)) or normalise the inputs"
        )
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
        last_batch = (outcome.halt[0] + 1) * trainer.steps_per_update - 1
        facts = _clean_facts(case, last_batch, trainer)
        # A halt reporting a non-finite value is a real divergence, not a false alarm.
        finite = _finite_report(outcome.halt) is not None
        verdict = "false alarm" if finite else "diverged on clean, finite batches"
        where = " on clean, finite batches, with a finite loss and grad norm" if finite else ""
        return f"{verdict}: {outcome.describe()}{where}; before it:{facts}"
    if not outcome.returned:
        return f"{outcome.describe()}\n  on clean, finite batches"
    if outcome.continued_non_finite:
        return f"{outcome.describe()} without raising: it continued past a non-finite value"
    history = outcome.history
    if history is not None and history.unit == "step" and len(history.entries) != steps:
        return (
            f"returned {len(history.entries)} history entries for {steps} optimizer steps "
            f"({trainer.batches_per_run(steps)} batches, steps_per_update="
            f"{trainer.steps_per_update}): one (loss, grad_norm) per optimizer step"
        )
    return None


def judge_never_continue(case: PoisonedCase, outcome: Outcome, trial: Trial) -> str | None:
    poisoned, every = case.first_step(trial.trainer), trial.trainer.check_every
    if outcome.returned:
        hints = _continuation_hints(outcome, poisoned, trial)
        return f"returned normally after the poison at step {poisoned}: {outcome.describe()}{hints}"
    if outcome.halt is None:
        return _wrong_error(outcome)
    if outcome.halt[0] >= poisoned + every:  # late, or numbered in other units
        return _misplaced_halt(case, outcome.halt[0], trial, "the first poison")
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
    watch_checks: bool = False  # its judge reads the steps passed to nozero.check_finite


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
        watch_checks=True,
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
