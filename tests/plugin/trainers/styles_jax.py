"""JAX trainers in styles the recipes do not show, written as their users write them.

A flax.linen ``TrainState`` (``TrainState.create`` sets ``step=0``, a Python int, and the
first step returns an array in its place: two call signatures, one compilation) under
``nozero.jax.Guard``, returning the guard's result; the same loop with
``optax.apply_if_finite``, which skips bad steps (wrong on purpose). Copied into
``pytester`` directories and imported there by name.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import optax
from flax.training import train_state

from nozero.jax import Guard
from nozero.testing import TrainerUnderTest, count_traces


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.relu(nn.Dense(8)(x)))


MODEL = MLP()
TX = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))


def train_step(state, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["x"])
        return optax.sigmoid_binary_cross_entropy(logits, batch["y"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), {"loss": loss, "grads": grads}


def new_state(x: np.ndarray, tx: optax.GradientTransformation) -> train_state.TrainState:
    variables = MODEL.init(jax.random.key(0), x)
    return train_state.TrainState.create(apply_fn=MODEL.apply, params=variables["params"], tx=tx)


def example() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((8, 4)).astype(np.float32),
        "y": (rng.random((8, 1)) < 0.5).astype(np.float32),
    }


GUARD = Guard(train_step, sync_every=10)


def guarded_train(batches):
    return GUARD.run(new_state(batches[0]["x"], TX), batches)  # records: the history


def trainstate_guard() -> TrainerUnderTest:
    return TrainerUnderTest.from_example(
        example(), guarded_train, compile_count=count_traces(GUARD.single)
    )


SKIPPING_TX = optax.apply_if_finite(TX, max_consecutive_errors=10)
skipping_step = jax.jit(train_step)


def skipping_train(batches):
    state = new_state(batches[0]["x"], SKIPPING_TX)
    for batch in batches:
        state, _ = skipping_step(state, batch)
    return state


def trainstate_apply_if_finite() -> TrainerUnderTest:
    return TrainerUnderTest.from_example(
        example(), skipping_train, compile_count=count_traces(skipping_step)
    )
