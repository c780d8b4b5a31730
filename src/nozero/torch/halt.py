"""The torch guard's halt: the documented error, carrying what a caller needs to roll back."""

from __future__ import annotations

import dataclasses
from typing import Any

from nozero.contract import NonFiniteError


@dataclasses.dataclass(frozen=True)
class HaltContext:
    """The first bad optimizer step as the guard saw it.

    ``state`` holds the live state dicts (``"optimizer"``, and ``"model"`` when the guard
    knows the model). They equal the last good step's: no update landed from ``step`` on.
    ``batch`` is what the halted step was given, if the loop passed it. ``after`` says what
    the host-side objects did from the bad step on (optimizer steps taken and masked,
    micro-batches consumed, each param group's learning rate at the bad step and now), so a
    caller knows what to roll back. ``reason`` names the rule that fired.
    """

    step: int
    loss: float
    grad_norm: float
    reason: str
    state: dict[str, Any]
    batch: Any
    after: dict[str, Any]


class GuardHalt(NonFiniteError):
    """The documented error at the exact first bad optimizer step, with its context.

    The message and ``step``/``loss``/``grad_norm`` are the documented error's own
    (formatted by ``nozero.contract``); ``context`` is a :class:`HaltContext`.
    """

    context: HaltContext | None

    def __init__(
        self, step: int, loss: float, grad_norm: float, context: HaltContext | None = None
    ) -> None:
        super().__init__(step, loss, grad_norm)
        self.context = context

    def __reduce__(self) -> tuple[Any, ...]:
        # Ranks and worker processes get the error back with its fields; the context holds
        # live tensors and stays in the process that raised.
        return (type(self), (self.step, self.loss, self.grad_norm))
