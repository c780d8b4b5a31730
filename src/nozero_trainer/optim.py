"""The optimiser: optax gradient clipping, then AdamW on a warmup-cosine schedule."""

from __future__ import annotations

import optax

from nozero_trainer.config import TrainConfig


def make_schedule(config: TrainConfig) -> optax.Schedule:
    """Linear warmup from 0 to ``peak_lr``, cosine decay to ``peak_lr * end_lr_ratio``."""
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.peak_lr,
        warmup_steps=config.warmup_steps,
        decay_steps=config.steps,
        end_value=config.peak_lr * config.end_lr_ratio,
    )


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """``clip_by_global_norm`` followed by ``adamw`` on :func:`make_schedule`."""
    return optax.chain(
        optax.clip_by_global_norm(config.clip_norm),
        optax.adamw(make_schedule(config), weight_decay=config.weight_decay),
    )
