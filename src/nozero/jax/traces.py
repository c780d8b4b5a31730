"""Counting compilations of a function without a global counter."""

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
                "count_traces wraps the Python function before jax.jit; a jitted function "
                "runs its body only while tracing, so write jax.jit(count_traces(fn))"
            )
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.count = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self.fn(*args, **kwargs)


def count_traces(fn: Callable[..., Any]) -> TraceCounter:
    """Wrap ``fn`` so that ``.count`` says how many times JAX traced it."""
    return TraceCounter(fn)
