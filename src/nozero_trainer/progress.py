"""The progress lines a run prints on stderr: numbers a person can read at a glance.

Compilation is timed apart (JAX reports every compile through ``jax.monitoring``), so
the steps/s shown is the rate over the last few lines (compile time left out), not an
average that includes the first compile. A window of lines rather than the last one,
because the guard reads a sync's values while the next steps run: two syncs can reach
the host moments apart, and one interval alone would show a burst. A line never shows a
non-finite step: the halt's message, printed next, says which step it was.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import IO

import jax

# Tracing, lowering and XLA compilation: together, the time a first call spends compiling.
COMPILE_EVENTS = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }
)
_compile_seconds = 0.0
_listening = False


def _on_duration(event: str, seconds: float, **_: object) -> None:
    global _compile_seconds
    if event in COMPILE_EVENTS:
        _compile_seconds += seconds


def compile_seconds() -> float:
    """Seconds this process has spent compiling with XLA so far."""
    global _listening
    if not _listening:  # one listener per process, summing every compile
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True
    return _compile_seconds


def format_number(value: float) -> str:
    """4 significant digits; exponent form past 1e5 or below 1e-3 (``2.347e+23``)."""
    if not math.isfinite(value):
        return str(value)
    if value != 0 and not (1e-3 <= abs(value) < 1e5):
        return f"{value:.3e}"
    return f"{value:.4g}"


RATE_WINDOW = 5
"""How many of the latest progress lines the steps/s figure is measured over."""


class Progress:
    """One line per sync: steps done, a bar, loss, gradient norm, LR and the recent rate."""

    def __init__(self, total: int, start: int, stream: IO[str]) -> None:
        self.total, self.stream = total, stream
        self.last_time = time.perf_counter()
        self.last_compile = compile_seconds()
        self.running = 0.0  # seconds spent on steps so far, compiles left out
        self.window: deque[tuple[int, float]] = deque([(start, 0.0)], maxlen=RATE_WINDOW + 1)

    def update(self, step: int, loss: float, grad_norm: float, lr: float) -> None:
        """``step`` optimizer steps are done, the last with these (finite) values."""
        now, compiled = time.perf_counter(), compile_seconds()
        compiling = compiled - self.last_compile
        self.running += max(now - self.last_time - compiling, 0.0)
        self.window.append((step, self.running))
        first_step, first_running = self.window[0]
        rate = (step - first_step) / max(self.running - first_running, 1e-9)
        if compiling > 0.05:
            print(
                f"compiled in {compiling:.1f} s (not counted in steps/s)",
                file=self.stream,
                flush=True,
            )
        done = min(step / self.total, 1.0)
        bar = "#" * int(24 * done) + "." * (24 - int(24 * done))
        print(
            f"step {step:>6}/{self.total} [{bar}] loss {format_number(loss)} "
            f"grad_norm {format_number(grad_norm)} lr {lr:.2e} {rate:.1f} steps/s",
            file=self.stream,
            flush=True,
        )
        self.last_time, self.last_compile = now, compiled
