"""The guard as a Lightning callback: ``Trainer(callbacks=[NonFiniteGuard(sync_every=16)])``.

Each micro-batch's loss is observed at ``on_before_backward``; the optimizer step is
recorded at ``on_before_optimizer_step`` (after Lightning's AMP unscaling and before its
clipping, so an overflowed norm is seen unclipped), where a due sync raises before the
update; the guard's hooks on the optimizer keep every update off from the first bad step
on. The step index is ``trainer.global_step``.
``trainer.fit`` raises the :class:`~nozero.torch.GuardHalt` through Lightning's own
teardown. Works with ``pytorch_lightning`` or the ``lightning`` package, whichever is
installed (``pytorch_lightning`` first).
"""

from __future__ import annotations

from typing import Any

import torch

from nozero.torch.guard import Guard, GuardSettings
from nozero.torch.scaling import MAX_SCALER_SKIPS, MIN_SCALE
from nozero.torch.wrappers import unwrap

try:
    import pytorch_lightning as pl
except ImportError:  # pragma: no cover - the unified package instead
    import lightning.pytorch as pl  # type: ignore[no-redef]


class NonFiniteGuard(pl.Callback):
    """Halt ``fit`` at the exact first optimizer step whose loss or gradient is non-finite.

    ``sync_every``, ``max_scaler_skips`` and ``min_scale`` are the
    :class:`~nozero.torch.Guard`'s; the GradScaler of Lightning's fp16 precision plugin
    is picked up on its own. ``guards`` maps each optimizer to its guard while fitting.
    """

    def __init__(
        self,
        sync_every: int = 16,
        *,
        max_scaler_skips: int = MAX_SCALER_SKIPS,
        min_scale: float = MIN_SCALE,
    ) -> None:
        self.settings = GuardSettings(sync_every, max_scaler_skips, min_scale)
        self.guards: dict[int, Guard] = {}
        self._batch: Any = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.guards = {
            id(opt): self.settings.guard(
                opt,
                scaler=scaler,
                model=pl_module,
                first_step=trainer.global_step,
            )
            for opt in (unwrap(o) for o in trainer.optimizers)
        }

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch = batch

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        if not torch.is_grad_enabled() or not self.guards:
            return
        # Lightning divides each micro-batch's loss by the accumulation count.
        scale = trainer.accumulate_grad_batches if pl_module.automatic_optimization else 1
        for guard in self.guards.values():
            guard.observe(loss.detach() * scale if scale != 1 else loss)

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        guard = self.guards.get(id(unwrap(optimizer)))
        if guard is not None:
            guard.before_step(self._batch)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        guards, self.guards = self.guards, {}
        for guard in guards.values():
            guard.close()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        guards, self.guards = self.guards, {}
        for guard in guards.values():
            guard.release()
