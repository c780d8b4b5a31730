"""One clean run per registered trainer before its checks, measured: each run's time limit
follows it, and a second run tells whether ``run`` compiles again on every call.

A trainer that retries a poisoned batch forever then fails in seconds, not in the
two minutes a fixed limit would take; a trainer that retraces every run is told why it is
slow instead of taking minutes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from nozero.plugin.trainer import TrainerUnderTest
from nozero.plugin.watchdog import call_with_limit

# A run may take FACTOR times the first clean run (compilation included), and never less
# than FLOOR_SECONDS (a loaded machine, a cold cache); the first clean run itself may take
# CEILING_SECONDS. --nozero-timeout replaces all of this.
FLOOR_SECONDS = 5.0
FACTOR = 5.0
CEILING_SECONDS = 120.0


@dataclass(frozen=True)
class Calibration:
    """``seconds``: the limit of one run, and how it was chosen; ``retraced``: why every
    run compiles again, or None."""

    seconds: float
    basis: str
    retraced: str | None = None


def _retrace_problem(compiles: int, seconds: float) -> str:
    return (
        f"compiled again on a second run over the same clean batches ({compiles} "
        f"compilations in 2 runs, {seconds:.1f} s for the second): it retraces on every "
        "run, so every example pays the compilation. Something run() builds is new on each "
        "call: an nnx.Optimizer or model, a jax.jit / nnx.jit of a new function, a Python "
        "value passed as a static argument. Build it once, in the factory or fixture, and "
        "reset its state at the start of run() (nnx.update(model, initial_state), "
        "optimizer state from tx.init(params))"
    )


def calibrate(trainer: TrainerUnderTest, steps: int, timeout: float | None) -> Calibration:
    """Run the trainer on its own clean batches (twice when it counts compilations)."""
    batches = trainer.clean_batches(0, steps)
    ceiling = timeout or CEILING_SECONDS
    count = (
        trainer.compile_count if getattr(trainer.compile_count, "problem", None) is None else None
    )
    start = time.perf_counter()
    first = call_with_limit(trainer.run, (batches,), ceiling, quiet=False)
    took = time.perf_counter() - start
    if timeout is not None:
        basis = "--nozero-timeout / ini nozero_timeout"
        seconds = timeout
    else:
        seconds = min(CEILING_SECONDS, max(FLOOR_SECONDS, FACTOR * took))
        basis = (
            f"{FACTOR:g} x its first clean run of {took:.2f} s, at least {FLOOR_SECONDS:g} s; "
            "--nozero-timeout sets it"
        )
    if first.timed_out or count is None:
        return Calibration(seconds, basis)
    before = count()
    start = time.perf_counter()
    second = call_with_limit(trainer.run, (batches,), seconds, quiet=False)
    again = time.perf_counter() - start
    compiled = count() - before
    if compiled >= 1 and not second.timed_out:
        return Calibration(seconds, basis, _retrace_problem(compiled + 1, again))
    return Calibration(seconds, basis)
