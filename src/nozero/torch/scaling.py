"""An fp16 ``GradScaler`` beside the guard: its skips are loss scaling, not a halt, until...

...the scaler skips ``max_skips`` steps in a row, or its scale would fall below
``min_scale``: a scaler that keeps backing off is hiding a run that has diverged, and
the rule pages (NZ406) ask a safe scaler to stop there. A non-finite *unscaled* loss
halts at once. Everything here stays on the device; the scaler's per-optimizer state is
read where ``GradScaler.unscale_`` leaves it.
"""

from __future__ import annotations

import dataclasses

import torch

# Defaults: NZ406 suggests halting after 10-20 consecutive skips. A scale below 1 means
# the gradients overflow fp16 even unscaled.
MAX_SCALER_SKIPS = 16
MIN_SCALE = 1.0


@dataclasses.dataclass
class ScalerWatch:
    """The guard's view of one ``torch.amp.GradScaler`` (``None``/disabled: no scaler)."""

    scaler: torch.amp.GradScaler | None
    max_skips: int = MAX_SCALER_SKIPS
    min_scale: float = MIN_SCALE

    def __post_init__(self) -> None:
        if self.max_skips < 1:
            raise ValueError(f"max_scaler_skips must be >= 1, got {self.max_skips}")
        if not self.min_scale >= 0:
            raise ValueError(f"min_scale must be >= 0, got {self.min_scale}")

    @property
    def active(self) -> bool:
        return self.scaler is not None and self.scaler.is_enabled()

    def _state(self, optimizer: torch.optim.Optimizer) -> dict:
        assert self.scaler is not None
        return self.scaler._per_optimizer_states[id(optimizer)]

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale the gradients unless the loop already did (e.g. before clipping)."""
        assert self.scaler is not None
        if not self._state(optimizer)["found_inf_per_device"]:
            self.scaler.unscale_(optimizer)

    def found_inf(self, optimizer: torch.optim.Optimizer, device: torch.device) -> torch.Tensor:
        """The scaler's verdict for this step: float32 0-dim, exactly 1.0 on overflow."""
        flags = list(self._state(optimizer)["found_inf_per_device"].values())
        if not flags:
            raise RuntimeError(
                "the GradScaler has no inf check for this step: call guard.step() after "
                "scaler.scale(loss).backward(), once per optimizer step"
            )
        total = flags[0].to(device, non_blocking=True)
        for flag in flags[1:]:
            total = total + flag.to(device, non_blocking=True)
        return (total > 0).to(torch.float32).reshape(())

    def scale_too_low(self, found_inf: torch.Tensor) -> torch.Tensor:
        """Whether the scale after this step's update falls below the floor (0-dim bool)."""
        assert self.scaler is not None
        scale = self.scaler._scale
        if scale is None:
            return torch.zeros((), dtype=torch.bool, device=found_inf.device)
        backoff = self.scaler.get_backoff_factor()
        scale = scale.to(found_inf.device).reshape(())
        after = torch.where(found_inf.reshape(()) > 0, scale * backoff, scale)
        return after < self.min_scale

    def update(self) -> None:
        """The scaler's own update (on the device), after the step."""
        assert self.scaler is not None
        self.scaler.update()
