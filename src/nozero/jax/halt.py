"""The guard's halt: the documented error, typed with what a caller needs to investigate it."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Generic, TypeVar

from nozero.contract import NonFiniteError

ContextT = TypeVar("ContextT")


@dataclasses.dataclass(frozen=True)
class StepContext:
    """A halted step as the guard sees it: its values, the state it started from, its batch.

    ``state`` is the confirmed state replayed up to the step (never a state the step or
    a later one produced); ``batch`` is what that step was given (one step's slice of a
    multi-step batch).
    """

    step: int
    loss: float
    grad_norm: float
    state: Any
    batch: Any


class GuardHalt(NonFiniteError, Generic[ContextT]):
    """The documented error raised by a guard, with its context declared, not attached.

    The message and the ``step``/``loss``/``grad_norm`` fields are the documented
    error's own (``nozero.contract`` formats them). ``context`` is a :class:`StepContext`
    or whatever the guard's ``context`` hook built from one; ``postmortem`` is where a
    caller stored its investigation bundle, if it wrote one.
    """

    context: ContextT
    postmortem: str | os.PathLike[str] | None

    def __init__(
        self,
        step: int,
        loss: float,
        grad_norm: float,
        context: ContextT,
        postmortem: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(step, loss, grad_norm)
        self.context = context
        self.postmortem = postmortem

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.step, self.loss, self.grad_norm, self.context, self.postmortem))
