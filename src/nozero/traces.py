"""Counting a jitted function's compilations from what JAX itself records: its cache.

No global counter and no wrapper around the Python function: ``jax.jit`` keeps one
cache entry per compilation, and ``equinox.filter_jit`` holds such a function. Nothing
here imports JAX, so the pytest plugin can offer it without loading a framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["count_traces"]


def _cache_size_reader(function: Any) -> Callable[[], int]:
    """How to read one jitted function's number of compilations."""
    seen = set()
    while id(function) not in seen:
        seen.add(id(function))
        if callable(getattr(function, "_cache_size", None)):  # jax.jit
            return function._cache_size
        # equinox.filter_jit and functools.wraps-style wrappers hold the jitted function
        inner = getattr(function, "_cached", None) or getattr(function, "__wrapped__", None)
        if inner is None:
            break
        function = inner
    raise TypeError(
        f"count_traces: {function!r} is not a jitted function (jax.jit, equinox.filter_jit); "
        "pass the function your run() calls, or compile_count=<your own counter>"
    )


def count_traces(*jitted: Any) -> Callable[[], int]:
    """The compilations of these jitted functions so far, summed, read from JAX's cache.

    Use it as ``TrainerUnderTest(compile_count=...)``; a guard's functions are
    ``guard.single`` and ``guard.multi``.
    """
    if not jitted:
        raise TypeError("count_traces needs at least one jitted function")
    readers = [_cache_size_reader(function) for function in jitted]
    return lambda: sum(read() for read in readers)
