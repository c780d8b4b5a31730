"""The device-side sticky record: one small float64 vector per guard, updated every step.

Each optimizer step folds its verdict into the vector on the device (no host read): the
first bad step's index, loss and gradient norm stay once set, and ``found_inf`` turns to
exactly ``1.0`` from that step on (the float32 flag torch's fused optimizers skip an
update on). The host reads the vector only at sync points, through a non-blocking copy
into (pinned, on CUDA) host memory and an event.
"""

from __future__ import annotations

import dataclasses
import math

import torch

# Positions in the record vector.
FIRST_BAD, LOSS, GRAD_NORM, SKIPS, STEPS, REASON = range(6)

# Why a step halted, by the code the record stores.
REASONS = {
    1: "non-finite loss or gradient",
    2: "too many consecutive loss-scaler skips",
    3: "loss scale below its floor",
}


@dataclasses.dataclass(frozen=True)
class HostRecord:
    """The record as the host read it at a sync point."""

    first_bad: int | None
    loss: float
    grad_norm: float
    skips: int
    steps: int
    reason: str | None


class StepRecord:
    """The sticky record of one guard, living on ``device``."""

    def __init__(self, device: torch.device, first_step: int = 0) -> None:
        self.device = device
        self.values = torch.tensor(
            [-1.0, math.nan, math.nan, 0.0, float(first_step), 0.0],
            dtype=torch.float64,
            device=device,
        )
        # Exactly 1.0 from the first bad step on: the fused kernels' ``found_inf``.
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        self._ge = torch.zeros((), dtype=torch.bool, device=device)
        cuda = device.type == "cuda"
        self._host = torch.empty(6, dtype=torch.float64, pin_memory=cuda)
        self._event: torch.cuda.Event | None = None

    def fold(
        self,
        bad: torch.Tensor,
        loss: torch.Tensor,
        grad_norm: torch.Tensor,
        skips: torch.Tensor,
        reason: torch.Tensor,
    ) -> None:
        """Fold one step's verdict in (0-dim device tensors; ``bad`` is boolean)."""
        v = self.values
        step = v[STEPS]
        newly = bad & (v[FIRST_BAD] < 0)
        fresh = torch.stack([step, loss, grad_norm, skips, step + 1, reason])
        kept = torch.stack([v[FIRST_BAD], v[LOSS], v[GRAD_NORM], skips, step + 1, v[REASON]])
        v.copy_(torch.where(newly, fresh, kept))
        torch.ge(v[FIRST_BAD], 0, out=self._ge)
        self.found_inf.copy_(self._ge)

    def skips(self) -> torch.Tensor:
        """The consecutive loss-scaler skips so far (0-dim device tensor)."""
        return self.values[SKIPS]

    def start_read(self) -> None:
        """Start copying the record to the host without waiting for the device."""
        self._host.copy_(self.values, non_blocking=True)
        if self.device.type == "cuda":
            self._event = torch.cuda.Event()
            self._event.record()

    def finish_read(self) -> HostRecord:
        """Wait for the copy :meth:`start_read` began and return what it read."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        first, loss, norm, skips, steps, reason = self._host.tolist()
        bad = first >= 0
        return HostRecord(
            first_bad=int(first) if bad else None,
            loss=loss,
            grad_norm=norm,
            skips=int(skips),
            steps=int(steps),
            reason=REASONS.get(int(reason)) if bad else None,
        )
