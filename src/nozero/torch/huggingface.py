"""The guard as a Hugging Face ``TrainerCallback``: ``Trainer(callbacks=[NonFiniteGuard()])``.

The Trainer passes a callback no loss, so the guard takes each micro-batch's loss from
the model's own output (``output.loss``, read by a forward hook in training mode only:
a device tensor, never read on the host) and keeps the last micro-batch's inputs for the
error's context. At ``on_pre_optimizer_step`` (after the Trainer's clipping) it records
the step on accelerate's inner optimizer, whose hooks keep every update off from the first
bad step on; a due sync raises there, before the update. The step index is
``state.global_step``. ``trainer.train()`` raises the :class:`~nozero.torch.GuardHalt`.

The Trainer clips the gradients (``max_grad_norm``, 1.0 by default) before the callback
runs, and clipping a step whose norm overflowed scales its gradients by ``1/inf = 0``: a
finite, zero step the guard would let through. So the callback takes the clipping over:
it sets ``args.max_grad_norm`` to 0 for the run (back at the end) and clips to the same
norm itself, after the check, with the norm it computed anyway.
A model whose Trainer computes the loss outside the model (a custom ``compute_loss``,
label smoothing) gives no ``output.loss``: the guard then checks the gradients alone and
reports ``loss=nan``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from nozero.torch.guard import Guard, GuardSettings
from nozero.torch.halt import GuardHalt
from nozero.torch.scaling import MAX_SCALER_SKIPS, MIN_SCALE


class NonFiniteGuard(TrainerCallback):
    """Halt ``train()`` at the exact first optimizer step whose loss or gradient is non-finite.

    ``sync_every``, ``max_scaler_skips`` and ``min_scale`` are the
    :class:`~nozero.torch.Guard`'s; accelerate's fp16 GradScaler is picked up on its own.
    ``guard`` is the guard while training.
    """

    def __init__(
        self,
        sync_every: int = 16,
        *,
        max_scaler_skips: int = MAX_SCALER_SKIPS,
        min_scale: float = MIN_SCALE,
    ) -> None:
        self.settings = GuardSettings(sync_every, max_scaler_skips, min_scale)
        self.guard: Guard | None = None
        self._losses: list[torch.Tensor] = []
        self._inputs: Any = None
        self._handles: list[Any] = []
        self._args: TrainingArguments | None = None
        self._max_grad_norm: float | None = None

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: torch.nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        if model is None:
            raise ValueError("NonFiniteGuard needs the Trainer's model (got none)")
        self._model = model
        # Take the clipping over (see the module's docstring); put it back at the end.
        self._args = args
        self._max_grad_norm = args.max_grad_norm if args.max_grad_norm > 0 else None
        if self._max_grad_norm is not None:
            args.max_grad_norm = 0.0
        self._handles = [
            model.register_forward_pre_hook(self._keep_inputs, with_kwargs=True),
            model.register_forward_hook(self._keep_loss),
        ]

    def _keep_inputs(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        if module.training and torch.is_grad_enabled():
            self._inputs = kwargs if kwargs else args

    def _keep_loss(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor):
            self._losses.append(loss.detach())

    def on_pre_optimizer_step(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        optimizer: Any = None,
        **kwargs: Any,
    ) -> None:
        if self.guard is None:
            self.guard = self.settings.guard(
                optimizer,  # accelerate's wrapper: the guard hooks the torch optimizer in it
                model=self._model,
                first_step=state.global_step,
                max_grad_norm=self._max_grad_norm,
            )
        losses, self._losses = self._losses, []
        for loss in losses:
            self.guard.observe(loss)
        try:
            self.guard.before_step(self._inputs)
        except GuardHalt:
            self._release()
            raise

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        guard, self.guard = self.guard, None
        self._release()
        if guard is not None:
            guard.close()

    def _release(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._args is not None and self._max_grad_norm is not None:
            self._args.max_grad_norm = self._max_grad_norm
            self._max_grad_norm = None
        if self.guard is not None:
            self.guard.release()
            self.guard = None
