"""What one ``run`` did: raised (which error, at which step), ran out of time, or returned
a history, a model / params / state, or nothing. The judges read only this."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from nozero.contract import NonFiniteError, parse_message
from nozero.plugin.batches import Batch
from nozero.plugin.checked import Seen, recording, steps_checked
from nozero.plugin.foreign import foreign_check
from nozero.plugin.messages import describe_error, near_miss
from nozero.plugin.returned import (
    Entry,
    History,
    ReaderFailure,
    finite,
    inspect_state,
    read_history,
)
from nozero.plugin.trainer import TrainerUnderTest
from nozero.plugin.watchdog import call_with_limit

WHAT_TO_RETURN = (
    "return the per-step (loss, grad_norm) history (pairs, a list of metric dicts, a dict of "
    "lists or Keras' History), or the trained model / params / state (its float arrays are "
    "checked finite)"
)


def article(word: str) -> str:
    """``a`` or ``an`` before ``word`` as it is spoken: an MLP, a Linear, an Adam state."""
    letters = word.lstrip("_")
    acronym = len(letters) > 1 and letters[:2].isupper()
    vowel_sound = "AEFHILMNORSX" if acronym else "aeiouAEIOU"
    return "an" if letters[:1] in tuple(vowel_sound) else "a"


@dataclass(frozen=True)
class Outcome:
    """How ``run`` ended. ``state_*`` describe a returned model / params / state."""

    returned: bool
    history: History | None = None
    reader_failure: ReaderFailure | None = None
    checked_steps: frozenset[int] = frozenset()  # steps passed to nozero.check_finite
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

    @property
    def entries(self) -> tuple[Entry, ...]:
        return () if self.history is None else self.history.entries

    def first_non_finite(self) -> tuple[int, float, float | None] | None:
        for step, (loss, grad_norm) in enumerate(self.entries):
            if not (finite(loss) and finite(grad_norm)):
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
            if miss:
                return f"{self.error_text}\n    not the documented error: {miss}"
            library = foreign_check(self.error)
            return self.error_text + (f"\n    {library}" if library else "")
        if self.state_type is not None:
            state = f"{article(self.state_type)} {self.state_type}"
            if self.bad_array is None:
                return (
                    f"returned normally: {state} whose {self.state_arrays} "
                    "float arrays are all finite"
                )
            return f"returned normally: {state} in which {self.bad_array}"
        if self.history is None:
            return "returned normally, returning nothing"
        unit = self.history.unit
        bad = self.first_non_finite()
        if bad is None:
            return (
                f"returned normally with an all-finite history ({self.history.source}) of "
                f"{len(self.entries)} entries"
            )
        step, loss, grad_norm = bad
        norm = "not recorded" if grad_norm is None else repr(grad_norm)
        return (
            f"returned normally; its history's first non-finite entry is "
            f"{unit} {step}: loss={loss!r} grad_norm={norm}"
        )


def _documented_halt(error: Exception) -> tuple[int, float, float] | None:
    if isinstance(error, NonFiniteError):
        return error.step, error.loss, error.grad_norm
    if isinstance(error, RuntimeError):
        return parse_message(str(error))
    return None


def read_returned(returned: Any, units: dict[int, str] | None = None) -> Outcome:
    """Interpret what ``run`` returned; a leaf nozero cannot read raises ReaderFailure.
    ``units``: the lengths a list of bare losses may have, and what each entry is."""
    if returned is None:
        return Outcome(returned=True)
    history = read_history(returned, units)
    if history is not None:
        return Outcome(returned=True, history=history)
    count, bad = inspect_state(returned)
    kind = type(returned).__qualname__
    if count == 0:
        return Outcome(
            returned=True,
            malformed=f"run returned {article(kind)} {kind} holding no float arrays: "
            + WHAT_TO_RETURN,
        )
    return Outcome(returned=True, state_type=kind, state_arrays=count, bad_array=bad)


def observe(
    trainer: TrainerUnderTest,
    batches: list[Batch],
    seconds: float,
    *,
    quiet: bool,
    watch_checks: bool = False,
) -> Outcome:
    """Run the trainer once, within ``seconds``, and record how it ended; with
    ``watch_checks``, also which steps it passed to ``nozero.check_finite``."""
    seen: Seen = []
    watch = recording(seen) if watch_checks else None
    result = call_with_limit(trainer.run, (batches,), seconds, quiet=quiet, context=watch)
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
        steps = len(batches) // max(1, trainer.steps_per_update)
        units = {len(batches): "micro-batch", steps: "step"}  # one a step wins a tie
        outcome = read_returned(result.value, units)
    except ReaderFailure as failure:  # nozero's own problem, not the trainer's
        return Outcome(returned=True, reader_failure=failure)
    return dataclasses.replace(outcome, checked_steps=frozenset(steps_checked(seen)))
