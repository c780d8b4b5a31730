"""SIGTERM and SIGINT end a run cleanly: never in the middle of writing a file.

While :func:`catch_signals` is active, either signal raises :class:`RunInterrupted` in
the main thread, so the runner can record ``"interrupted"`` in ``status.json`` and keep
the last confirmed checkpoint. Inside :func:`deferred` (a checkpoint or status being
written) the signal is held and raised as soon as the block ends, so a file is never cut
off by it. Outside the main thread (a caller's worker thread) nothing is installed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunInterrupted(Exception):
    """The run received SIGTERM or SIGINT; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.name}")


_state = threading.local()


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _handler(signum: int, frame: FrameType | None) -> None:
    if _depth() > 0:
        _state.pending = signum  # raised when the write in progress is complete
        return
    raise RunInterrupted(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a signal until the block (a file being written) is done, then raise it."""
    _state.depth = _depth() + 1
    try:
        yield
    finally:
        _state.depth -= 1
    pending = getattr(_state, "pending", None)
    if pending is not None and _state.depth == 0:
        _state.pending = None
        raise RunInterrupted(pending)


@contextmanager
def catch_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into :class:`RunInterrupted` for the block's duration."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _handler) for signum in SIGNALS}
    _state.pending = None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
