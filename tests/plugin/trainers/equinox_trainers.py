"""equinox trainers whose jitted step checks itself with ``eqx.error_if`` or checkify, as
users write them: converted to the documented error, or left as the library raises it.

Copied into ``pytester`` directories and imported there by name.
"""

from __future__ import annotations

import contextlib
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import checkify

from nozero import format_message
from nozero.jax import nonfinite_errors
from nozero.testing import TrainerUnderTest, count_traces

tx = optax.adam(1e-3)
initial, static = eqx.partition(eqx.nn.MLP(4, 1, 8, 1, key=jax.random.key(0)), eqx.is_array)


def _loss_and_grads(params, x, y):
    def loss_fn(p):
        return jnp.mean((jax.vmap(eqx.combine(p, static))(x) - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return loss, grads, optax.tree.norm(grads)


@eqx.filter_jit
def error_if_step(params, opt_state, x, y):
    loss, grads, grad_norm = _loss_and_grads(params, x, y)
    bad = ~(jnp.isfinite(loss) & jnp.isfinite(grad_norm))
    loss = eqx.error_if(loss, bad, format_message(0, math.nan, math.nan))
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _checkify_step(params, opt_state, x, y):
    loss, grads, grad_norm = _loss_and_grads(params, x, y)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    checkify.check(finite, format_message(0, math.nan, math.nan))
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


checkify_step = jax.jit(checkify.checkify(_checkify_step))


def error_if_run(convert: bool):
    def run(batches):
        params, opt_state = initial, tx.init(initial)
        for step, batch in enumerate(batches):
            with nonfinite_errors(step) if convert else contextlib.nullcontext():
                params, opt_state, loss = error_if_step(params, opt_state, batch["x"], batch["y"])
                loss.block_until_ready()
        return eqx.combine(params, static)

    return run


def checkify_run(convert: bool):
    def run(batches):
        params, opt_state = initial, tx.init(initial)
        for step, batch in enumerate(batches):
            error, (params, opt_state) = checkify_step(params, opt_state, batch["x"], batch["y"])
            if convert:
                with nonfinite_errors(step):
                    error.throw()
            else:
                error.throw()
        return eqx.combine(params, static)

    return run


def make_trainer(style: str) -> TrainerUnderTest:
    """``style``: error_if or checkify, then "converted" or "raw"."""
    library, _, how = style.partition("_")
    run = (error_if_run if library == "error" else checkify_run)(how.endswith("converted"))
    step = error_if_step if library == "error" else checkify_step
    rng = np.random.default_rng(0)
    example = {
        "x": rng.standard_normal((8, 4)).astype(np.float32),
        "y": rng.standard_normal((8, 1)).astype(np.float32),
    }
    return TrainerUnderTest.from_example(example, run, compile_count=count_traces(step))
