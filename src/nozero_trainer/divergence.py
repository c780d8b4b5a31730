"""Which checkpoints a restart may roll back to: those whose loss had not yet diverged.

A run can diverge through finite losses (1e5, 1e20, 1e36) long before a step is
non-finite. A checkpoint saved in that stretch holds diverged parameters: restarting from
it halts again. So a checkpoint is judged by the training losses around it:

- its *own* loss is the median loss of the :data:`WINDOW` steps taken from its
  parameters (steps ``N .. N+WINDOW-1`` for a checkpoint after ``N`` steps), and the
  median of the ``WINDOW`` steps that led to it (``N-WINDOW .. N-1``), whichever is
  larger; a non-finite value counts as infinite;
- the *reference* is the best loss so far: the lowest median over runs of ``WINDOW``
  consecutive steps before ``N`` (a median, so one lucky batch is not the bar);
- it had diverged when its own loss is not finite or more than :data:`FACTOR` times the
  reference. A checkpoint with no logged step before it (step 0) is judged by finiteness.

Medians over a few steps keep one unlucky batch from condemning a checkpoint; a factor of
100 is far above the batch-to-batch spread of a healthy run's loss, and far below the
orders of magnitude a divergence climbs through. No numpy or JAX here.
"""

from __future__ import annotations

import bisect
import math
import statistics
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FACTOR = 100.0  # a loss this many times the best so far has diverged
WINDOW = 3  # steps per median


def _median(values: Sequence[float]) -> float:
    """Median with NaN counted as +inf (a NaN loss is as bad as an infinite one)."""
    return statistics.median(v if not math.isnan(v) else math.inf for v in values)


class LossHistory:
    """The per-step training losses of a run, as the runner logs them (every attempt).

    Steps are kept in order with a running best, so judging a checkpoint costs a binary
    search however long the run: the runner judges its checkpoints at every save.
    """

    def __init__(self) -> None:
        # Typed arrays: 8 bytes a step, so a run of millions of steps stays small.
        self.steps = array("q")
        self.values = array("d")
        self.best = array("d")  # best[i]: the best window median up to steps[i]

    @property
    def losses(self) -> dict[int, float]:
        return dict(zip(self.steps, self.values, strict=True))

    def record(self, first_step: int, losses: Iterable[float]) -> None:
        """Steps ``first_step, first_step+1, ...`` had these losses.

        Logging a step again means the run went back there: what came after is dropped.
        """
        self.forget_from(first_step)
        for offset, loss in enumerate(losses):
            self.steps.append(first_step + offset)
            self.values.append(float(loss))
            window = _median(self.values[-WINDOW:])  # fewer steps than a window: all
            if len(self.values) <= WINDOW:
                self.best.append(window)
            else:
                self.best.append(min(self.best[-1], window))

    def forget_from(self, step: int) -> None:
        """A restart from ``step`` runs the steps from there again: drop what they logged."""
        keep = bisect.bisect_left(self.steps, step)
        del self.steps[keep:], self.values[keep:], self.best[keep:]

    def replay(self, events: Iterable[Mapping[str, Any]]) -> None:
        """On resume: the losses of a run's ``metrics.jsonl`` events, as its restarts left them."""
        for event in events:
            if event.get("event") in ("restart", "resume"):
                self.forget_from(int(event["step"]))
            elif event.get("event") in (None, "train") and event.get("loss") is not None:
                self.record(int(event["step"]), [event["loss"]])

    def best_before(self, step: int) -> float | None:
        """The lowest median of ``WINDOW`` consecutive logged steps before ``step``."""
        index = bisect.bisect_left(self.steps, step) - 1
        return self.best[index] if index >= 0 else None

    def _window(self, first: int) -> Sequence[float]:
        """The losses logged for steps ``first .. first+WINDOW-1``."""
        start = bisect.bisect_left(self.steps, first)
        end = bisect.bisect_left(self.steps, first + WINDOW)
        return self.values[start:end]

    def diverged(self, step: int) -> str | None:
        """Why the checkpoint after ``step`` steps had diverged, or ``None`` when it had not."""
        windows = [self._window(start) for start in (step - WINDOW, step)]
        own = max((_median(w) for w in windows if w), default=None)
        if own is None:
            return None  # nothing logged around it: nothing says it diverged
        if not math.isfinite(own):
            return "its loss was not finite"
        best = self.best_before(step)
        if best is not None and math.isfinite(best) and own > FACTOR * max(best, 0.0):
            return f"its loss {own:.3g} was over {FACTOR:g}x the best so far, {best:.3g}"
        return None
