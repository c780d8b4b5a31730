"""The exact-step guard for a PyTorch loop: no host sync per step, no bad update lands.

``Guard.step(loss)`` replaces ``optimizer.step()``. Each step records on the device
whether its loss and global gradient norm are finite (:mod:`nozero.torch.record`), agrees
with the other ranks (:mod:`nozero.torch.distributed`) and steps the optimizer through a
mask (:mod:`nozero.torch.mask`) that keeps every update off from the first bad step on.
The host reads the record every ``sync_every`` steps and at :meth:`Guard.close`; a bad
step raises :class:`GuardHalt` with that exact step, its loss and gradient norm, while
the parameters and optimizer state are still those of the last good step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from nozero.torch import distributed, grads
from nozero.torch.halt import GuardHalt, HaltContext
from nozero.torch.mask import UpdateMask
from nozero.torch.record import REASONS, HostRecord, StepRecord
from nozero.torch.scaling import MAX_SCALER_SKIPS, MIN_SCALE, ScalerWatch

_REASON_CODE = {text: code for code, text in REASONS.items()}


def _device_of(optimizer: torch.optim.Optimizer) -> torch.device:
    for group in optimizer.param_groups:
        for p in group["params"]:
            return p.device
    raise ValueError("Guard needs an optimizer with at least one parameter")


class Guard:
    """Guard ``optimizer``: call :meth:`step` where the loop called ``optimizer.step()``.

    ``sync_every`` is how often (in optimizer steps) the host reads the device record.
    ``scaler`` is the loop's ``torch.amp.GradScaler``, if any: the guard then unscales,
    steps and updates it itself, so its overflow skips stay loss scaling; a non-finite
    unscaled loss, ``max_scaler_skips`` consecutive skips or a scale that would fall below
    ``min_scale`` halt. ``process_group`` is the group the ranks agree over (default: the
    default group when ``torch.distributed`` is initialized). ``model``, if given, puts
    its state dict in the error's context. ``sharded_grads`` overrides the detection of
    sharded (FSDP) gradients, whose norm is reduced across ranks. ``first_step`` is the
    index of the first step guarded (a resumed run's global step).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        sync_every: int = 16,
        *,
        scaler: torch.amp.GradScaler | None = None,
        max_scaler_skips: int = MAX_SCALER_SKIPS,
        min_scale: float = MIN_SCALE,
        process_group: Any = None,
        model: torch.nn.Module | None = None,
        sharded_grads: bool | None = None,
        first_step: int = 0,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            kind = type(optimizer).__name__
            raise TypeError(f"Guard needs a torch.optim.Optimizer, got {kind}")
        if int(sync_every) < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.optimizer = optimizer
        self.sync_every = int(sync_every)
        self.model = model
        self.device = _device_of(optimizer)
        self.scaler = ScalerWatch(scaler, int(max_scaler_skips), float(min_scale))
        self.group = distributed.resolve_group(process_group)
        self.sharded = grads.is_sharded(optimizer) if sharded_grads is None else sharded_grads
        self.steps = int(first_step)
        self.batches = 0  # losses observed (micro-batches), for the error's context
        self._record = StepRecord(self.device, self.steps)
        # This step's mask, updated in place (the hooks may hold it before it is set).
        self._step_mask = torch.zeros((), dtype=torch.float32, device=self.device)
        self._mask = UpdateMask(optimizer, lambda: self._step_mask)
        self._mask.step_index = lambda: self.steps - 1
        self._loss_sum: torch.Tensor | None = None
        self._loss_count = 0
        # Host-side facts per step since the last clean sync: its batch, the losses
        # observed before it, the learning rates it stepped with.
        self._pending: dict[int, tuple[Any, int, list[float]]] = {}
        self._since_sync = 0
        self._halt: GuardHalt | None = None
        self._closed = False

    # -- the loop's calls ------------------------------------------------------------------
    def observe(self, loss: torch.Tensor | float) -> None:
        """Record a loss of this optimizer step (once per micro-batch under accumulation).

        The step's loss is the mean of what it observed; one non-finite loss makes the
        step bad. Nothing is read on the host.
        """
        if isinstance(loss, torch.Tensor):
            value = loss.detach().reshape(()).to(device=self.device, dtype=torch.float64)
        else:
            value = torch.tensor(float(loss), dtype=torch.float64, device=self.device)
        self._loss_sum = value if self._loss_sum is None else self._loss_sum + value
        self._loss_count += 1
        self.batches += 1

    def before_step(self, batch: Any = None) -> None:
        """Record this optimizer step on the device, count it and sync when due.

        Call it after the gradients are final (after clipping) and right before the
        optimizer steps; the masking hooks on the optimizer then keep a bad update off.
        Adapters whose framework steps the optimizer itself call this; loops call
        :meth:`step` or :meth:`apply`.
        """
        self._check_open()
        opt = self.optimizer
        scaled = self.scaler.active
        if scaled:
            self.scaler.unscale(opt)
        norm_sq = grads.sum_of_squares(grads.grads(opt), self.device)
        if self._loss_sum is None:
            loss = torch.full((), math.nan, dtype=torch.float64, device=self.device)
            loss_ok = torch.ones((), dtype=torch.bool, device=self.device)
        else:
            loss = self._loss_sum / self._loss_count
            loss_ok = torch.isfinite(loss)
        self._pending[self.steps] = (
            batch,
            self.batches,
            [
                float(g["lr"]) if not isinstance(g["lr"], torch.Tensor) else math.nan
                for g in opt.param_groups
            ],
        )
        self._loss_sum, self._loss_count = None, 0
        local_norm = norm_sq.sqrt()
        if scaled:
            found_inf = self.scaler.found_inf(opt, self.device)
            skipped = found_inf.reshape(()) > 0
            skips = torch.where(skipped, self._record.skips() + 1, 0.0)
            too_many = skips >= self.scaler.max_skips
            too_low = self.scaler.scale_too_low(found_inf)
            bad = ~loss_ok | too_many | too_low
            # A step another rank found bad reads as a non-finite loss or gradient here.
            reason = torch.where(
                too_many & loss_ok,
                _REASON_CODE[REASONS[2]],
                torch.where(too_low & loss_ok, _REASON_CODE[REASONS[3]], _REASON_CODE[REASONS[1]]),
            ).to(torch.float64)
        else:
            found_inf = None
            skips = torch.zeros((), dtype=torch.float64, device=self.device)
            bad = ~(loss_ok & torch.isfinite(local_norm))
            reason = torch.ones((), dtype=torch.float64, device=self.device)
        bad, loss, summed = distributed.agree(self.group, bad, loss, norm_sq)
        norm = summed.sqrt() if self.sharded else local_norm
        self._record.fold(bad, loss, norm, skips, reason)
        sticky = self._record.found_inf
        if found_inf is None:
            self._step_mask.copy_(sticky)
        else:
            torch.maximum(sticky, found_inf, out=self._step_mask)
        self.steps += 1
        self._since_sync += 1
        if self._since_sync >= self.sync_every:
            self.sync()

    def apply(self, closure: Callable[[], Any] | None = None, *, batch: Any = None) -> None:
        """Step the optimizer under the guard (``closure``: evaluated once, its loss observed).

        ``batch`` is kept (a reference) until the next clean sync, for the error's context.
        """
        if closure is not None:
            with torch.enable_grad():
                self.observe(closure())
        self.before_step(batch)
        self.optimizer.step()
        if self.scaler.active:
            self.scaler.update()

    def step(self, loss: torch.Tensor | float, batch: Any = None) -> None:
        """``observe(loss)`` then ``apply()``: one guarded optimizer step."""
        self.observe(loss)
        self.apply(batch=batch)

    # -- the host's reads -----------------------------------------------------------------
    def sync(self) -> None:
        """Read the device record now; raise :class:`GuardHalt` if a step was bad."""
        if self._halt is not None:
            raise self._halt
        self._record.start_read()
        host = self._record.finish_read()
        self._since_sync = 0
        if host.first_bad is None:
            self._pending.clear()
            self._mask.forget_host()
            return
        self._halt = self._halt_for(host)
        raise self._halt

    def close(self) -> None:
        """The last check; takes the guard's hooks off the optimizer."""
        if self._closed:
            return
        try:
            self.sync()
        finally:
            self._mask.remove()
            self._closed = True

    def release(self) -> None:
        """Take the hooks off without a check (the loop stopped on another error)."""
        self._mask.remove()
        self._closed = True

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.close()
        else:  # the loop's own error propagates; only the hooks come off
            self.release()

    # -- helpers --------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Guard is closed; make a new one to keep training")
        if self._halt is not None:
            raise self._halt

    def _halt_for(self, host: HostRecord) -> GuardHalt:
        step = int(host.first_bad)  # type: ignore[arg-type]
        self._mask.restore_host(step)
        batch, batches_at, lrs_at = self._pending.get(step, (None, self.batches, []))
        lrs_now = [
            float(g["lr"]) if not isinstance(g["lr"], torch.Tensor) else math.nan
            for g in self.optimizer.param_groups
        ]
        state: dict[str, Any] = {"optimizer": self.optimizer.state_dict()}
        if self.model is not None:
            state["model"] = self.model.state_dict()
        after = {
            "optimizer_steps": self.steps - step,
            "batches": self.batches - batches_at,
            "lr_at_step": lrs_at,
            "lr_now": lrs_now,
        }
        context = HaltContext(
            step=step,
            loss=host.loss,
            grad_norm=host.grad_norm,
            reason=host.reason or REASONS[1],
            state=state,
            batch=batch,
            after=after,
        )
        return GuardHalt(step, host.loss, host.grad_norm, context)
