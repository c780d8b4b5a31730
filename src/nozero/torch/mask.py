"""Keep a step's update off the parameters and optimizer state while a mask is set.

The mask is a float32 0-dim device tensor, exactly ``1.0`` to skip. Fused
Adam/AdamW/SGD read it as ``optimizer.found_inf`` (the protocol ``GradScaler`` uses) and
skip the whole update on the device: parameters, moments and step counts, at no cost.
Any other optimizer steps normally and is then rolled back with ``torch.where`` (never a
multiplication: ``0 * nan`` is ``nan``) from a copy taken just before the step: one copy
and one select over the parameters and their state per step.

Step counts that a non-capturable optimizer keeps as CPU scalars beside CUDA parameters
cannot be selected on the device without a sync; they are copied on the host before
each step instead and put back at the halt (:meth:`UpdateMask.restore_host`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.hooks import RemovableHandle

_MISSING = object()


def is_fused(optimizer: torch.optim.Optimizer) -> bool:
    """True when every param group steps through a fused kernel that reads ``found_inf``."""
    groups = optimizer.param_groups
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False)) and all(
        g.get("fused") for g in groups
    )


class UpdateMask:
    """Hooks on ``optimizer.step`` that skip the update when ``mask()`` holds ``1.0``."""

    def __init__(self, optimizer: torch.optim.Optimizer, mask: Callable[[], torch.Tensor]) -> None:
        self.optimizer = optimizer
        self.fused = is_fused(optimizer)
        self._mask = mask
        self._prior: object = _MISSING
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._seen: set[int] = set()
        self._cond: torch.Tensor | None = None
        # Host-side scalars per step index, kept since the last clean sync.
        self.host_history: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.step_index: Callable[[], int] = lambda: 0
        self._handles: list[RemovableHandle] = [
            optimizer.register_step_pre_hook(self._before),
            optimizer.register_step_post_hook(self._after),
        ]

    def remove(self) -> None:
        """Take the hooks off the optimizer."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- fused: the kernels' own found_inf ------------------------------------------------
    def _before(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        mask = self._mask()
        if self.fused:
            prior = optimizer.__dict__.get("found_inf", _MISSING)
            self._prior = prior
            if isinstance(prior, torch.Tensor):
                # A GradScaler's own flag for this step: skip on either.
                mask = torch.maximum(prior.to(mask.device), mask)
            optimizer.found_inf = mask  # type: ignore[attr-defined]
            return
        self._snapshot(mask)

    def _after(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if self.fused:
            if self._prior is _MISSING:
                optimizer.__dict__.pop("found_inf", None)
            else:
                optimizer.found_inf = self._prior  # type: ignore[attr-defined]
            self._prior = _MISSING
            return
        self._roll_back()

    # -- any other optimizer: copy before, select after ----------------------------------
    def _tensors(self) -> list[torch.Tensor]:
        """The tensors a step may write: parameters with a gradient and their state."""
        out: list[torch.Tensor] = []
        state = self.optimizer.state
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                out.append(p)
                for value in state.get(p, {}).values():
                    if isinstance(value, torch.Tensor):
                        out.append(value)
        return out

    @torch.no_grad()
    def _snapshot(self, mask: torch.Tensor) -> None:
        self._cond = mask.reshape(()) > 0
        device = mask.device
        live = self._tensors()
        here = [t for t in live if t.device == device]
        host = [t for t in live if t.device != device]
        if len(self._pairs) != len(here) or any(
            a is not t for (a, _), t in zip(self._pairs, here, strict=False)
        ):
            self._pairs = [(t, torch.empty_like(t)) for t in here]
        if self._pairs:
            torch._foreach_copy_([b for _, b in self._pairs], [t for t, _ in self._pairs])
        self._seen = {id(t) for t in live}
        if host:
            self.host_history[self.step_index()] = [(t, t.clone()) for t in host]

    @torch.no_grad()
    def _roll_back(self) -> None:
        cond = self._cond
        if cond is None:
            return
        for live, backup in self._pairs:
            torch.where(cond, backup, live, out=live)
        # State the step created (a first step): back to zeros, as fresh state starts.
        for t in self._tensors():
            if id(t) not in self._seen and t.device == cond.device:
                torch.where(cond, torch.zeros((), dtype=t.dtype, device=t.device), t, out=t)
        self._cond = None

    def restore_host(self, step: int) -> None:
        """Put host-side scalars back as they were before ``step`` (at a halt)."""
        for live, saved in self.host_history.get(step, []):
            live.copy_(saved)

    def forget_host(self) -> None:
        """Drop the host-side copies (after a clean sync: nothing to roll back to)."""
        self.host_history.clear()
