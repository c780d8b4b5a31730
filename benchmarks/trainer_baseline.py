"""The baseline training loop, written the common way, for the trainer benchmark.

One jitted step per Python iteration; each batch gathered on the host with numpy
fancy indexing and shipped to the device; ``float(loss)`` checked every 500 steps.
Shares with the reference trainer: the model (``apply_model``), the loss, the
optimiser, the initial state and the batch order. Does not share: the trainer's loop
(data on the device, many steps per ``lax.scan`` dispatch, one host check per sync)
and, unless ``matmul`` says so, its custom weight gradient
(``model.matmul_transposed_grad``): by default the baseline differentiates ``x @ w``
the way autodiff writes it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nozero_trainer.config import TrainConfig
from nozero_trainer.loop import batch_rows, init_state
from nozero_trainer.loss import multilabel_focal_loss
from nozero_trainer.model import Matmul, apply_model
from nozero_trainer.optim import make_optimizer

CHECK_EVERY = 500


def make_baseline_step(
    config: TrainConfig, weights: np.ndarray, mask: np.ndarray, matmul: Matmul = jnp.matmul
):
    """The jitted step; ``matmul=matmul_transposed_grad`` gives it the trainer's gradient."""
    optimizer = make_optimizer(config)
    weights, mask = jnp.asarray(weights), jnp.asarray(mask)

    def loss_fn(params, x, y):
        logits = apply_model(params, x, matmul)
        return multilabel_focal_loss(
            logits,
            y,
            head_weights=weights,
            head_mask=mask,
            focal_gamma=config.focal_gamma,
            focal_alpha=config.focal_alpha,
            label_smoothing=config.label_smoothing,
            reverse_ce_weight=config.reverse_ce_weight,
        )[0]

    @jax.jit
    def step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def baseline_train(config: TrainConfig, cls: np.ndarray, labels: np.ndarray, step_fn) -> float:
    """Run ``config.steps`` steps; returns the final loss."""
    state = init_state(config, cls.shape[1], labels.shape[1])
    params, opt_state = state.params, state.opt_state
    loss = None
    for step in range(config.steps):
        rows = batch_rows(config, step, len(cls))
        params, opt_state, loss = step_fn(params, opt_state, cls[rows], labels[rows])
        if step % CHECK_EVERY == 0 and not math.isfinite(float(loss)):
            raise RuntimeError(f"non-finite loss near step {step}")
    jax.block_until_ready(params)
    return float(loss)
