"""The documented non-finite error: its message, its pattern and the one place it is raised.

Everything else in nozero (the trainer's guard, the pytest plugin, the docs) refers to
this module instead of formatting the message by hand, so the contract cannot drift.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

MESSAGE_TEMPLATE = (
    "non-finite loss/grad at step {step}: loss={loss} grad_norm={grad_norm}"
    " \u2014 stopping for investigation (never zero-and-continue)"
)

MESSAGE_PATTERN = re.compile(
    r"non-finite loss/grad at step (.+?): loss=(.+?) grad_norm=(.+?)"
    r" \u2014 stopping for investigation \(never zero-and-continue\)"
)


class NonFiniteError(RuntimeError):
    """Raised when a training step's loss or gradient norm is NaN or infinite.

    It is a ``RuntimeError`` so code that documents "raises RuntimeError" stays true,
    and it carries the step and values so callers never need to parse the message.
    """

    def __init__(self, step: int, loss: float, grad_norm: float) -> None:
        self.step = int(step)
        self.loss = float(loss)
        self.grad_norm = float(grad_norm)
        super().__init__(format_message(self.step, self.loss, self.grad_norm))

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the exception picklable (multiprocessing, pytest-xdist) with its fields.
        return (type(self), (self.step, self.loss, self.grad_norm))


def format_message(step: int, loss: float, grad_norm: float) -> str:
    """The exact documented message for a halt at ``step``."""
    return MESSAGE_TEMPLATE.format(step=int(step), loss=float(loss), grad_norm=float(grad_norm))


def parse_message(text: str) -> tuple[int, float, float] | None:
    """Return ``(step, loss, grad_norm)`` if ``text`` is exactly the documented message."""
    match = MESSAGE_PATTERN.fullmatch(text)
    if match is None:
        return None
    step, loss, grad_norm = match.groups()
    try:
        return int(step), float(loss), float(grad_norm)
    except ValueError:
        return None


def _as_float(value: Any, what: str) -> float:
    """Convert a Python float, numpy scalar or 0-d array (numpy, JAX, torch) to ``float``.

    ``float()`` works on all of them through ``__float__``; neither JAX nor torch is
    imported here. A torch tensor is detached first, so one that requires grad converts
    without torch's warning.
    """
    if type(value).__module__.startswith("torch") and callable(getattr(value, "detach", None)):
        value = value.detach()
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        kind = type(value).__name__
        raise TypeError(f"check_finite: {what} must be a scalar, got {kind}") from err


# Called with every check's (step, loss, grad_norm): the pytest plugin's ``overflow``
# check learns which steps a trainer checked. Empty outside the plugin's runs.
_watchers: list[Callable[[Any, float, float], None]] = []


@contextlib.contextmanager
def watching_checks(watcher: Callable[[Any, float, float], None]) -> Iterator[None]:
    """Within the block, ``watcher(step, loss, grad_norm)`` sees every check's values."""
    _watchers.append(watcher)
    try:
        yield
    finally:
        _watchers.remove(watcher)


def checks_watched() -> bool:
    """Whether anything watches the checks now (guards skip :func:`report_checked` if not)."""
    return bool(_watchers)


def report_checked(step: int, loss: float, grad_norm: float) -> None:
    """Tell the watchers of a step a guard checked on its own, as ``check_finite`` does.

    A guard that reads its device record at a sync calls this for each step the record
    holds, up to and including a bad one; it raises nothing itself.
    """
    for watcher in _watchers:
        watcher(step, loss, grad_norm)


def check_finite(step: int, loss: Any, grad_norm: Any) -> None:
    """Raise :class:`NonFiniteError` unless both ``loss`` and ``grad_norm`` are finite."""
    loss_value = _as_float(loss, "loss")
    norm_value = _as_float(grad_norm, "grad_norm")
    report_checked(step, loss_value, norm_value)
    if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
        raise NonFiniteError(int(step), loss_value, norm_value)
