"""The device-side sticky record: one small float64 vector per guard, updated every step.

Each optimizer step folds its verdict into the vector on the device, with no host read
and a handful of kernels. Until a step is bad, every step writes its loss and gradient
norm; from the first bad step on they stay frozen, a sticky flag is set, and the vector
counts the steps taken since (that step included). ``found_inf`` is the flag as the
float32 fused optimizers skip an update on: exactly ``1.0`` from the first bad step on.
The host reads the vector only at sync points, through a non-blocking copy into (pinned,
on CUDA) host memory and an event; the first bad step is the host's step count minus the
bad-step count.
"""

from __future__ import annotations

import dataclasses
import math

import torch

# Positions in the record vector.
LOSS, GRAD_NORM, BAD_STEPS, SKIPS, REASON = range(5)

# Why a step halted, by the code the record stores.
NON_FINITE, TOO_MANY_SKIPS, SCALE_FLOOR = 1, 2, 3
REASONS = {
    NON_FINITE: "non-finite loss or gradient",
    TOO_MANY_SKIPS: "too many consecutive loss-scaler skips",
    SCALE_FLOOR: "loss scale below its floor",
}


@dataclasses.dataclass(frozen=True)
class HostRecord:
    """The record as the host read it at a sync point."""

    first_bad: int | None
    loss: float
    grad_norm: float
    skips: int
    reason: str | None


class StepRecord:
    """The sticky record of one guard, living on ``device``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.values = torch.tensor(
            [math.nan, math.nan, 0.0, 0.0, float(NON_FINITE)], dtype=torch.float64, device=device
        )
        # Exactly 1.0 from the first bad step on: the fused kernels' ``found_inf``.
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        self._sticky = torch.zeros((), dtype=torch.bool, device=device)
        # Views made once: each step's fold is then a handful of kernel calls.
        self._head = self.values[: GRAD_NORM + 1]
        self._bad_steps = self.values[BAD_STEPS]
        self._skips = self.values[SKIPS]
        self._reason = self.values[REASON]
        cuda = device.type == "cuda"
        self._host = torch.empty(len(self.values), dtype=torch.float64, pin_memory=cuda)
        self._event: torch.cuda.Event | None = None

    def fold(
        self,
        bad: torch.Tensor,
        loss_and_norm: torch.Tensor,
        skips: torch.Tensor | None = None,
        reason: torch.Tensor | None = None,
    ) -> None:
        """Fold one step's verdict in: ``bad`` (0-dim bool), ``[loss, grad norm]``.

        ``skips`` (the consecutive scaler skips after this step) and ``reason`` (a code of
        :data:`REASONS`) are for a guard with a loss scaler; without one the reason is
        always a non-finite loss or gradient.
        """
        sticky = self._sticky
        torch.where(sticky, self._head, loss_and_norm, out=self._head)
        if reason is not None:
            torch.where(sticky, self._reason, reason, out=self._reason)
        if skips is not None:
            self._skips.copy_(skips)
        torch.logical_or(sticky, bad, out=sticky)
        self._bad_steps.add_(sticky)
        self.found_inf.copy_(sticky)

    def skips(self) -> torch.Tensor:
        """The consecutive loss-scaler skips so far (0-dim device tensor)."""
        return self._skips

    def start_read(self) -> None:
        """Start copying the record to the host without waiting for the device."""
        self._host.copy_(self.values, non_blocking=True)
        if self.device.type == "cuda":
            self._event = torch.cuda.Event()
            self._event.record()

    def finish_read(self, steps: int) -> HostRecord:
        """Wait for the copy :meth:`start_read` began; ``steps``: the host's step count."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        loss, norm, bad_steps, skips, reason = self._host.tolist()
        bad = bad_steps > 0
        return HostRecord(
            first_bad=steps - int(bad_steps) if bad else None,
            loss=loss,
            grad_norm=norm,
            skips=int(skips),
            reason=REASONS.get(int(reason)) if bad else None,
        )
