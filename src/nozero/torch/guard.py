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

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from nozero import contract
from nozero.torch import distributed, grads, wrappers
from nozero.torch.halt import GuardHalt, HaltContext
from nozero.torch.mask import UpdateMask
from nozero.torch.record import (
    NON_FINITE,
    REASONS,
    SCALE_FLOOR,
    TOO_MANY_SKIPS,
    HostRecord,
    StepRecord,
)
from nozero.torch.scaling import MAX_SCALER_SKIPS, MIN_SCALE, ScalerWatch


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _not_finite(values: torch.Tensor) -> torch.Tensor:
    """Any element NaN or infinite, as a 0-dim bool: ``x - x`` is 0 exactly when finite."""
    return (values - values).ne(0).any()


def _lrs(optimizer: torch.optim.Optimizer) -> list[float]:
    """Each param group's learning rate (a tensor learning rate is not read: ``nan``)."""
    return [
        math.nan if isinstance(g["lr"], torch.Tensor) else float(g["lr"])
        for g in optimizer.param_groups
    ]


class Guard:
    """Guard ``optimizer``: call :meth:`step` where the loop called ``optimizer.step()``.

    ``optimizer`` is a ``torch.optim.Optimizer`` or a framework's wrapper of one
    (accelerate's ``AcceleratedOptimizer``, Lightning's ``LightningOptimizer``): the guard
    hooks the torch optimizer inside and steps the wrapper, whose own gradient
    accumulation and loss scaler it follows.

    ``sync_every`` is how often (in optimizer steps) the host reads the device record.
    ``scaler`` is the loop's ``torch.amp.GradScaler``, if any: the guard then unscales,
    steps and updates it itself, so its overflow skips stay loss scaling; a non-finite
    unscaled loss, ``max_scaler_skips`` consecutive skips or a scale that would fall below
    ``min_scale`` halt. ``process_group`` is the group the ranks agree over (default: the
    default group when ``torch.distributed`` is initialized). ``model``, if given, puts
    its state dict in the error's context. ``sharded_grads`` overrides the detection of
    sharded (FSDP) gradients, whose norm is reduced across ranks. ``first_step`` is the
    index of the first step guarded (a resumed run's global step). ``max_grad_norm``
    clips the gradients to that global norm after the check, reusing the guard's norm:
    clip here, not before ``step`` (clipping an overflowed norm zeroes the gradients, and
    a step on zero gradients is finite), or pass the clip's returned norm as ``grad_norm``.
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
        max_grad_norm: float | None = None,
    ) -> None:
        inner = wrappers.unwrap(optimizer)
        if int(sync_every) < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError(
                f"max_grad_norm must be > 0 (or None: no clipping), got {max_grad_norm}"
            )
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.optimizer = inner
        # What ``apply`` steps: the wrapper the loop was given (it may skip or scale).
        self._stepper = optimizer
        wrapper_scaler = wrappers.own_scaler(optimizer)
        scaler = scaler or wrapper_scaler
        # The wrapper updates its own scaler after its step; the guard updates any other.
        self._stepper_updates_scaler = scaler is not None and scaler is wrapper_scaler
        self.sync_every = int(sync_every)
        self.model = model
        params = _params(inner)
        if not params:
            raise ValueError("Guard needs an optimizer with at least one parameter")
        self.device = params[0].device
        self.scaler = ScalerWatch(scaler, int(max_scaler_skips), float(min_scale))
        self.group = distributed.resolve_group(process_group)
        self.sharded = grads.is_sharded(inner) if sharded_grads is None else sharded_grads
        self.steps = int(first_step)
        self.batches = 0  # losses observed (micro-batches), for the error's context
        self._dtensors = grads.has_dtensors(inner)
        # Per-tensor norms land on the guard's device unless a parameter lives elsewhere.
        self._norms_to = None if all(p.device == self.device for p in params) else self.device
        self._record = StepRecord(self.device, self.sync_every, 2 + len(params))
        # A loss scaler or ranks to agree with: the guard decides each step's verdict.
        self._coded = self.scaler.active or distributed.world_size(self.group) > 1
        # This step's mask, updated in place (the hooks may hold it before it is set): the
        # sticky flag itself, or under a scaler the larger of it and the scaler's skip.
        if self.scaler.active:
            self._step_mask = torch.zeros((), dtype=torch.float32, device=self.device)
        else:
            self._step_mask = self._record.found_inf
        self._mask = UpdateMask(inner, lambda: self._step_mask, lambda: self.steps - 1)
        self._losses: list[torch.Tensor] = []
        self._true = torch.ones((), dtype=torch.bool, device=self.device)
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
            if loss.numel() != 1:
                raise ValueError(
                    f"guard.observe/step: loss must be a scalar tensor, got shape "
                    f"{tuple(loss.shape)} (reduce it first, e.g. loss.mean())"
                )
            # Kept as given (read under no_grad at the step): a detach would cost a kernel.
            value = loss
            if value.device != self.device or value.dtype != torch.float32 or value.dim():
                value = value.detach().reshape(()).to(self.device, torch.float32, non_blocking=True)
        else:
            value = torch.tensor(float(loss), dtype=torch.float32, device=self.device)
        self._losses.append(value)
        self.batches += 1

    @torch.no_grad()
    def before_step(self, batch: Any = None, grad_norm: torch.Tensor | None = None) -> None:
        """Record this optimizer step on the device, count it and sync when due.

        Call it after the backward passes and right before the optimizer steps; the
        masking hooks on the optimizer then keep a bad update off. ``grad_norm`` is the
        step's global gradient norm if the loop computed it (``clip_grad_norm_``'s return,
        taken before clipping); otherwise the guard computes it. Adapters whose framework
        steps the optimizer itself call this; loops call :meth:`step` or :meth:`apply`.
        """
        self._check_open()
        opt = self.optimizer
        if self.scaler.active:
            self.scaler.unscale(opt)
        local = grads.grads(opt, self._dtensors)
        loss = self._step_loss()
        self._pending[self.steps] = (batch, self.batches, _lrs(opt))
        if grad_norm is not None:
            norms = [grads.as_global(grad_norm, self.device)]
        else:
            norms = grads.norms(local, self._norms_to)
        if self._coded:
            norm = self._record_verdict(loss, norms, sharded=self.sharded and grad_norm is None)
        else:
            self._record.write_checked(loss, norms)
            norm = None
        if self.max_grad_norm is not None:
            if norm is None:
                norm = grads.global_norm(norms, self.device)
            grads.clip(local, self.max_grad_norm, norm)
        self.steps += 1
        self._since_sync += 1
        if self._since_sync >= self.sync_every:
            self.sync()

    def _record_verdict(
        self, loss: torch.Tensor | None, norms: list[torch.Tensor], sharded: bool
    ) -> torch.Tensor:
        """Decide the step's verdict on the device (a scaler, or ranks); the global norm.

        A norm the loop gave is already global; sharded gradients' norms are combined
        across ranks.
        """
        norm = grads.global_norm(norms, self.device)
        if self.scaler.active:
            bad, reason, found_inf = self._scaled_verdict(loss, norm)
        else:
            observed = norm if loss is None else torch.stack([loss, norm])
            bad, reason, found_inf = _not_finite(observed), None, None
        if self.group is not None:
            no_loss = torch.zeros((), dtype=torch.float32, device=self.device)
            bad, loss_all, norm = distributed.agree(
                self.group, bad, no_loss if loss is None else loss, norm, sharded
            )
            loss = None if loss is None else loss_all
        code = torch.where(bad, NON_FINITE if reason is None else reason, 0)
        self._record.write_coded(code, bad, loss, norm.float())
        if found_inf is not None:
            torch.maximum(self._record.found_inf, found_inf, out=self._step_mask)
        return norm

    def _step_loss(self) -> torch.Tensor | None:
        """The mean of the losses observed since the last step (``None``: none observed)."""
        losses, self._losses = self._losses, []
        if not losses:
            return None
        if len(losses) == 1:
            return losses[0]
        return torch.stack([x.float() for x in losses]).mean()

    def _scaled_verdict(
        self, loss: torch.Tensor | None, norm: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Under a loss scaler: ``(bad, reason, the scaler's found_inf)``.

        An overflow (non-finite gradients) is the scaler's skip; the step is bad when the
        unscaled loss is not finite, the skips run to ``max_scaler_skips`` or the scale
        would fall below ``min_scale``.
        """
        found_inf = self.scaler.found_inf(self.optimizer, self.device)
        skipped = found_inf > 0
        skips = self._record.skips()
        skips.copy_(torch.where(skipped, skips + 1, 0.0))
        too_many = skips >= self.scaler.max_skips
        too_low = self.scaler.scale_too_low(found_inf)
        loss_ok = self._true if loss is None else ~_not_finite(loss)
        bad = ~loss_ok | too_many | too_low
        # A step another rank found bad reads as a non-finite loss or gradient here.
        reason = torch.where(
            too_many & loss_ok,
            TOO_MANY_SKIPS,
            torch.where(too_low & loss_ok, SCALE_FLOOR, NON_FINITE),
        )
        return bad, reason, found_inf

    def apply(
        self,
        closure: Callable[[], Any] | None = None,
        *,
        batch: Any = None,
        grad_norm: torch.Tensor | None = None,
    ) -> None:
        """Step the optimizer under the guard (``closure``: evaluated once, its loss observed).

        ``batch`` is kept (a reference) until the next clean sync, for the error's context;
        ``grad_norm`` as in :meth:`before_step`.
        """
        if closure is not None:
            with torch.enable_grad():
                self.observe(closure())
        if not wrappers.will_step(self._stepper):
            return  # mid-accumulation: the losses observed so far belong to the next step
        self.before_step(batch, grad_norm)
        self._stepper.step()
        if self.scaler.active and not self._stepper_updates_scaler:
            self.scaler.update()

    def step(
        self,
        loss: torch.Tensor | float,
        batch: Any = None,
        *,
        grad_norm: torch.Tensor | None = None,
    ) -> None:
        """``observe(loss)`` then ``apply()``: one guarded optimizer step."""
        self.observe(loss)
        self.apply(batch=batch, grad_norm=grad_norm)

    # -- the host's reads -----------------------------------------------------------------
    def sync(self) -> None:
        """Read the device record now; raise :class:`GuardHalt` if a step was bad."""
        if self._halt is not None:
            raise self._halt
        self._record.start_read()
        watched = contract.checks_watched()
        host = self._record.finish_read(self.steps - self._since_sync, every_row=watched)
        self._since_sync = 0
        for step, loss, grad_norm in host.checked:
            contract.report_checked(step, loss, grad_norm)
        if host.first_bad is None:
            self._pending.clear()
            self._mask.forget_host()
            return
        self._halt = self._halt_for(host)
        raise self._halt

    def close(self) -> None:
        """The last check; takes the guard's hooks off the optimizer.

        A halt already raised is not raised again (``close()`` in a ``finally`` is safe).
        """
        if self._closed:
            return
        if self._halt is not None:
            self.release()
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
        lrs_now = _lrs(self.optimizer)
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
            reason=host.reason or REASONS[NON_FINITE],
            state=state,
            batch=batch,
            after=after,
        )
        return GuardHalt(step, host.loss, host.grad_norm, context)


@dataclasses.dataclass(frozen=True)
class GuardSettings:
    """The settings a framework callback gives every guard it builds (one per optimizer)."""

    sync_every: int = 16
    max_scaler_skips: int = MAX_SCALER_SKIPS
    min_scale: float = MIN_SCALE

    def __post_init__(self) -> None:
        if int(self.sync_every) < 1:
            raise ValueError(f"sync_every must be >= 1, got {self.sync_every}")

    def guard(self, optimizer: torch.optim.Optimizer, **options: Any) -> Guard:
        """A :class:`Guard` over ``optimizer`` with these settings and ``options``."""
        return Guard(
            optimizer,
            int(self.sync_every),
            max_scaler_skips=self.max_scaler_skips,
            min_scale=self.min_scale,
            **options,
        )
