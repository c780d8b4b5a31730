"""Trainers with the guard mistakes users make, written the way users write them: a loss
checked with ``isnan`` only, a batch retried until it looks fine, a guard whose step
counter restarts, a callback raise left wrapped, a check that runs every few steps, an
``nnx.Optimizer`` built inside ``run()``.

Copied into ``pytester`` directories and imported there by name.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from nozero import NonFiniteError, check_finite
from nozero.testing import TrainerUnderTest, count_traces

BATCH_SPEC = {"x": ((8, 4), np.float32), "y": ((8, 1), np.float32)}
adam = optax.adam(1e-2)


def make_clean_batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 1)).astype(np.float32)
    return {"x": x, "y": y}


@jax.jit
def adam_step(params, opt_state, x, y):
    def loss_fn(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = adam.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, optax.tree.norm(grads)


def _fresh():
    params = {"w": jnp.full((4, 1), 0.1), "b": jnp.zeros(1)}
    return params, adam.init(params)


def isnan_only(batches):
    """Checks ``isnan(loss)`` only: an Inf loss goes through, Adam turns the updates to 0,
    and the params it returns are finite."""
    params, opt_state = _fresh()
    for step, batch in enumerate(batches):
        params, opt_state, loss, grad_norm = adam_step(params, opt_state, batch["x"], batch["y"])
        if jnp.isnan(loss):
            raise NonFiniteError(step, float(loss), float(grad_norm))
    return params


def retries_forever(batches):
    """Retries a batch while its loss looks wrong ("a transient glitch"); 1 s clean run."""
    w = np.full((4, 1), 0.1, np.float32)
    for step, batch in enumerate(batches):
        time.sleep(0.25)  # the real work of one step
        with np.errstate(all="ignore"):
            residual = batch["x"] @ w - batch["y"]
            loss = float(np.mean(residual**2))
        while not loss < 1e4:  # NaN, Inf and spikes: retry the batch
            time.sleep(0.05)
        check_finite(step, loss, loss)
        w = w - 0.01 * batch["x"].T @ residual / len(residual)
    return None


class StepGuard:
    """Counts the steps it has checked; made anew inside each call, it always says 0."""

    def __init__(self) -> None:
        self.step = 0

    def check(self, loss: float, grad_norm: float) -> None:
        check_finite(self.step, loss, grad_norm)
        self.step += 1


def constant_step(batches):
    params, opt_state = _fresh()
    history = []
    for batch in batches:
        params, opt_state, loss, grad_norm = adam_step(params, opt_state, batch["x"], batch["y"])
        StepGuard().check(float(loss), float(grad_norm))  # a new guard every step
        history.append((float(loss), float(grad_norm)))
    return history


def _raise_if_bad(step, loss, grad_norm):
    check_finite(int(step), float(loss), float(grad_norm))


@jax.jit
def callback_step(params, opt_state, step, x, y):
    params, opt_state, loss, grad_norm = adam_step(params, opt_state, x, y)
    jax.debug.callback(_raise_if_bad, step, loss, grad_norm)
    return params, opt_state, loss, grad_norm


def callback_unconverted(batches):
    """Raises the documented error inside a jitted ``jax.debug.callback``: JAX wraps it."""
    params, opt_state = _fresh()
    history = []
    for step, batch in enumerate(batches):
        params, opt_state, loss, grad_norm = callback_step(
            params, opt_state, step, batch["x"], batch["y"]
        )
        history.append((float(loss), float(grad_norm)))
    return history


def every_four_steps(batches):
    """Checks on every fourth step only (steps 3, 7, ...), reporting the step it checks."""
    params, opt_state = _fresh()
    history, bad = [], None
    for step, batch in enumerate(batches):
        params, opt_state, loss, grad_norm = adam_step(params, opt_state, batch["x"], batch["y"])
        loss, grad_norm = float(loss), float(grad_norm)
        if bad is None and not (math.isfinite(loss) and math.isfinite(grad_norm)):
            bad = (loss, grad_norm)
        if step % 4 == 3 and bad is not None:
            raise NonFiniteError(step, *bad)
        history.append((loss, grad_norm))
    return history


class Regressor(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(4, 1, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.dropout(self.linear(x))


@nnx.jit
def nnx_step(model, optimizer, x, y):
    def loss_fn(model):
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss, optax.tree.norm(grads)


def nnx_optimizer_per_run(batches):
    """Builds its model and nnx.Optimizer inside run(): nnx_step compiles on every run."""
    model = Regressor(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    for step, batch in enumerate(batches):
        loss, grad_norm = nnx_step(model, optimizer, batch["x"], batch["y"])
        check_finite(step, loss, grad_norm)
    return model


RUNS = {
    "isnan_only": isnan_only,
    "retries_forever": retries_forever,
    "constant_step": constant_step,
    "callback_unconverted": callback_unconverted,
    "every_four_steps": every_four_steps,
    "nnx_optimizer_per_run": nnx_optimizer_per_run,
}
COUNTERS = {
    "isnan_only": adam_step,
    "callback_unconverted": callback_step,
    "nnx_optimizer_per_run": nnx_step,
}


def make_trainer(mistake: str, **options) -> TrainerUnderTest:
    if mistake in COUNTERS:
        options.setdefault("compile_count", count_traces(COUNTERS[mistake]))
    return TrainerUnderTest(
        batch_spec=BATCH_SPEC, run=RUNS[mistake], make_clean_batch=make_clean_batch, **options
    )
