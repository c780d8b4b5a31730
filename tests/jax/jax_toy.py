"""A toy JAX trainer written the way users write one, for the ``nozero.jax`` tests.

Inputs are positive (|N(0, 1)| + 0.5) and the weights start positive, so every gradient
component is at least 2.5: a learning rate of 3e38 then overflows float32 in the update
although the step's loss and gradient are finite. The learning rate rides in the batch,
so a test can make one step's update overflow without a new compilation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

DIM = 4
BATCH = 8
STEPS = 12
LR = 1e-4
HUGE_LR = 3e38  # finite in float32; times a gradient of at least 2.5, it is not
HUGE_INPUT = 1e30  # finite; its loss stays finite, its gradient's global norm does not

OPTIMIZER = optax.chain(optax.trace(decay=0.5), optax.scale(-1.0))


def init_state() -> dict:
    params = {"w": jnp.full((DIM,), 0.1, jnp.float32), "b": jnp.zeros((), jnp.float32)}
    return {"params": params, "opt": OPTIMIZER.init(params)}


def make_batches(count: int = STEPS, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "x": (np.abs(rng.standard_normal((BATCH, DIM))) + 0.5).astype(np.float32),
            "lr": np.float32(LR),
        }
        for _ in range(count)
    ]


def loss_fn(params: dict, x: jax.Array) -> jax.Array:
    return 10.0 * jnp.mean(jax.nn.softplus(x @ params["w"] + params["b"]))


def step(state: dict, batch: dict) -> tuple[dict, dict]:
    """One optimizer step; reports its loss and gradients (the guard takes the norm)."""
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch["x"])
    updates, opt = OPTIMIZER.update(grads, state["opt"])
    updates = jax.tree.map(lambda u: batch["lr"] * u, updates)
    return {"params": optax.apply_updates(state["params"], updates), "opt": opt}, {
        "loss": loss,
        "grads": grads,
    }


def stack(batches: list[dict], per_dispatch: int) -> list[dict]:
    """Consecutive batches stacked ``per_dispatch`` at a time, for a multi-step function."""
    return [
        jax.tree.map(lambda *leaves: np.stack(leaves), *batches[i : i + per_dispatch])
        for i in range(0, len(batches), per_dispatch)
    ]


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]
