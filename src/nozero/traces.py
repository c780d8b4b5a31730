"""Counting a jitted function's compilations from what JAX itself records.

``jax.jit`` keeps one dispatch-cache entry per call signature; ``equinox.filter_jit`` and
``flax.nnx.jit`` hold such a function. A signature is not a compilation: a Python scalar
in the state (flax's ``TrainState.create`` sets ``step=0``) and the array the first step
returns in its place are two entries for one executable. So a ``jax.jit`` function counts
the new cache entries that came with a compile of its name (JAX's compile event names
``jit(NAME)``): a retrace adds both, a new signature alone adds no compile, and another
function of the same name adds no entry here. ``jax.pmap`` keeps no cache one can read, so its
compilations are counted from JAX's compile events: every pmap compiled in the process
while counting, so build other pmapped functions (an optimizer's init) once, outside
run(). Nothing here imports JAX at import time, so the pytest plugin can offer it without
loading a framework.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["count_traces"]

# The attributes that hold the jitted function inside a wrapper:
# equinox.filter_jit (_cached), flax.nnx.jit (jitted_fn), functools.wraps (__wrapped__).
_INNER = ("_cached", "jitted_fn", "__wrapped__")
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_PMAP_NAMES = ("jit(_fun)", "pmap(_fun)")


class _Compiles:
    """Backend compilations by function name, from JAX's monitoring events (one
    listener for the process, registered on first use)."""

    by_name: dict[str, int] = {}
    listening = False

    @classmethod
    def listen(cls) -> None:
        if cls.listening:
            return
        import jax.monitoring

        def heard(event: str, duration: float, **info: Any) -> None:
            if event == _COMPILE_EVENT:
                name = str(info.get("fun_name"))
                cls.by_name[name] = cls.by_name.get(name, 0) + 1

        jax.monitoring.register_event_duration_secs_listener(heard)
        cls.listening = True

    @classmethod
    def of(cls, names: tuple[str, ...]) -> int:
        return sum(cls.by_name.get(name, 0) for name in names)


class _JitCompiles:
    """A ``jax.jit`` function's compilations: each interval between two reads counts
    the fewer of its new cache entries and the compiles of its name (both grow together
    on a retrace, in the same call). Until a compile of its name has been seen (a
    wrapper may name it otherwise), every new entry counts; so do the entries it already
    had when counting began: the count is of compilations so far."""

    def __init__(self, function: Any) -> None:
        _Compiles.listen()
        self._function = function
        self._names = (f"jit({getattr(function, '__name__', '')})",)
        self._entries = function._cache_size()
        self._named = _Compiles.of(self._names)
        self._count = self._entries  # before counting began, each entry stands for one
        self._named_seen = False

    def __call__(self) -> int:
        entries, named = self._function._cache_size(), _Compiles.of(self._names)
        new = entries - self._entries
        self._named_seen = self._named_seen or named > self._named
        self._count += max(0, min(new, named - self._named) if self._named_seen else new)
        self._entries, self._named = entries, named
        return self._count


def _is_pmap(function: Any) -> bool:
    """A ``jax.pmap`` function: a plain function with ``lower``, wrapping the user's."""
    if "jax" not in sys.modules or not callable(getattr(function, "lower", None)):
        return False
    code = getattr(function, "__code__", None)
    filename = getattr(code, "co_filename", "").replace("\\", "/")
    return "/jax/_src/" in filename and "pmap" in filename


def _cache_size_reader(function: Any) -> Callable[[], int]:
    """How to read one jitted function's number of compilations."""
    given, seen = function, set()
    while id(function) not in seen:
        seen.add(id(function))
        if callable(getattr(function, "_cache_size", None)):  # jax.jit
            return _JitCompiles(function)
        if _is_pmap(function):
            _Compiles.listen()
            start = _Compiles.of(_PMAP_NAMES)
            return lambda: _Compiles.of(_PMAP_NAMES) - start
        inner = next((getattr(function, a) for a in _INNER if hasattr(function, a)), None)
        if inner is None:
            break
        function = inner
    raise TypeError(
        f"count_traces: {given!r} is not a jitted function (jax.jit, equinox.filter_jit, "
        "flax.nnx.jit, jax.pmap); pass the function your run() calls, or "
        "compile_count=<your own counter>"
    )


class TraceCounter:
    """The compilations so far, summed; ``problem`` says why it cannot count, if so."""

    def __init__(self, readers: list[Callable[[], int]], problem: str | None) -> None:
        self._readers = readers
        self.problem = problem

    def __call__(self) -> int:
        if self.problem is not None:
            raise TypeError(self.problem)
        return sum(read() for read in self._readers)


def count_traces(*jitted: Any) -> TraceCounter:
    """The compilations of these jitted functions so far, summed, read from JAX.

    Use it as ``TrainerUnderTest(compile_count=...)``; a guard's functions are
    ``guard.single`` and ``guard.multi``. A function it cannot read is not an error here
    (a fixture error would hit every check): ``pytest --nozero`` reports it once, as a
    failure of one check, and calling the counter raises ``TypeError``.
    """
    if not jitted:
        return TraceCounter([], "count_traces needs at least one jitted function")
    readers = []
    for function in jitted:
        try:
            readers.append(_cache_size_reader(function))
        except TypeError as error:
            return TraceCounter([], str(error))
    return TraceCounter(readers, None)
