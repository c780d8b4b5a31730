"""Run one trainer call with a time limit, so a trainer that retries forever or deadlocks
fails the check in bounded time instead of hanging the test session.

The call runs in a daemon worker thread (JAX, numpy and torch release the GIL and run
there as usual); the test thread waits for it. Past the limit the worker's stack is read
(where it is stuck), an exception is raised in it asynchronously so a Python-level retry
loop stops, and the call is abandoned.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

# Frames of these files are machinery, not the place a trainer is stuck.
_OWN_FILES = (__file__,)


class TrainerAbandoned(BaseException):
    """Raised inside a worker that ran past its time limit (never caught by trainers'
    ``except Exception``)."""


@dataclass(frozen=True)
class CallResult:
    """How a call ended: a value, an exception, or still running at the limit."""

    value: Any = None
    error: Exception | None = None
    timed_out: bool = False
    stuck_at: str = ""


def _stack_of(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return ""
    frames = [f for f in traceback.extract_stack(frame) if f.filename not in _OWN_FILES]
    return "".join(traceback.format_list(frames[-6:])).rstrip()


def _interrupt(thread: threading.Thread) -> None:
    ident = thread.ident
    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(ident), ctypes.py_object(TrainerAbandoned)
        )


def call_with_limit(
    function: Callable[..., Any],
    args: tuple,
    seconds: float,
    *,
    quiet: bool,
    context: AbstractContextManager[Any] | None = None,
) -> CallResult:
    """``function(*args)`` in a worker thread, abandoned after ``seconds``.

    ``quiet``: numpy floating-point warnings are off in the worker (the check injected the
    overflow itself, so they are not news). ``context``: entered in the worker around the
    call (the plugin records the run's ``check_finite`` calls with it).
    """
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with context if context is not None else contextlib.nullcontext():
                if quiet:
                    with np.errstate(all="ignore"), warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        box["value"] = function(*args)
                else:
                    box["value"] = function(*args)
        except TrainerAbandoned:
            pass
        except Exception as error:  # the judges decide which exceptions are acceptable
            box["error"] = error

    worker = threading.Thread(target=work, name="nozero-trainer-run", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        stuck_at = _stack_of(worker)
        _interrupt(worker)
        worker.join(1.0)
        return CallResult(timed_out=True, stuck_at=stuck_at)
    return CallResult(value=box.get("value"), error=box.get("error"))
