"""Counting compilations of a function without a global counter.

``nozero.testing.count_traces`` reads a jitted function's own cache instead; this counts
traces of the Python function itself, whatever jits it (a guard's own jit included).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class TraceCounter:
    """A Python function that counts how often it ran: under ``jax.jit``, once per trace.

    A jitted function runs its Python body only while JAX traces (= compiles) it, so
    ``count`` is its number of compilations. Wrap the function before jitting it.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        if hasattr(fn, "lower") and hasattr(fn, "__wrapped__"):
            raise TypeError(
                "TraceCounter wraps the Python function before jax.jit; a jitted function "
                "runs its body only while tracing, so write jax.jit(TraceCounter(fn))"
            )
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.count = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self.fn(*args, **kwargs)
