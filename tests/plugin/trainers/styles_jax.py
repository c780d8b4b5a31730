"""JAX trainers in styles the recipes do not show, written as their users write them.

A flax.linen ``TrainState`` (``TrainState.create`` sets ``step=0``, a Python int, and the
first step returns an array in its place: two call signatures, one compilation) under
``nozero.jax.Guard``, returning the guard's result; the same loop with
``optax.apply_if_finite``, which skips bad steps (wrong on purpose); a ``lax.scan`` of two
optimizer steps a call that raises the documented error itself and returns its list of
per-step losses (and the same with weakly typed first parameters, which compile twice).
Copied into ``pytester`` directories and imported there by name.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from nozero import NonFiniteError
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


STEPS_PER_CALL = 2
ADAM = optax.adam(1e-2)


@jax.jit
def scanned_steps(params, opt_state, xs, ys):
    def one(carry, xy):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(
            lambda p: jnp.mean((jnp.tanh(xy[0] @ p["w1"]) @ p["w2"] - xy[1]) ** 2)
        )(params)
        updates, opt_state = ADAM.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (loss, optax.tree.norm(grads))

    (params, opt_state), (losses, norms) = jax.lax.scan(one, (params, opt_state), (xs, ys))
    return params, opt_state, losses, norms


def scan_train(batches, dtype=jnp.float32):
    params = {"w1": jnp.full((4, 8), 0.1, dtype), "w2": jnp.full((8, 1), 0.1, dtype)}
    opt_state = ADAM.init(params)
    losses = []
    for start in range(0, len(batches), STEPS_PER_CALL):
        chunk = batches[start : start + STEPS_PER_CALL]
        xs, ys = (np.stack([b[k] for b in chunk]) for k in ("x", "y"))
        params, opt_state, chunk_losses, norms = scanned_steps(params, opt_state, xs, ys)
        for i, (loss, norm) in enumerate(
            zip(np.asarray(chunk_losses), np.asarray(norms), strict=True)
        ):
            if not (np.isfinite(loss) and np.isfinite(norm)):
                raise NonFiniteError(start + i, float(loss), float(norm))
            losses.append(float(loss))
    return losses  # one loss a step


def scan_losses() -> TrainerUnderTest:
    targets = np.random.default_rng(1).standard_normal((8, 1)).astype(np.float32)
    return TrainerUnderTest.from_example(
        {"x": example()["x"], "y": targets},
        scan_train,
        check_every=STEPS_PER_CALL,
        compile_count=count_traces(scanned_steps),
    )


def scan_losses_weak_init() -> TrainerUnderTest:
    """The same with ``jnp.full(shape, 0.1)``: weakly typed first parameters, so the
    second call (strongly typed, from Adam) compiles again."""
    trainer = scan_losses()
    return dataclasses.replace(trainer, run=lambda batches: scan_train(batches, dtype=None))
