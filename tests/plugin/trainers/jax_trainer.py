"""A small jitted JAX trainer for the plugin's tests; ``count_traces`` counts its compilations.

``retrace=True`` makes the step index a static argument: a new compilation per step, the
mistake the plugin's compile-count check exists to catch. Copied into ``pytester``
directories and imported there by name.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from nozero import check_finite
from nozero.testing import TrainerUnderTest, count_traces


def _loss(w, x, y):
    z = x @ w
    return jnp.mean(jax.nn.softplus(z) - y * z)


def _step(w, x, y, step=None):
    """One SGD step; ``step`` is unused, but static when retracing."""
    loss, grad = jax.value_and_grad(_loss)(w, x, y)
    return w - 0.5 * grad, loss, jnp.sqrt(jnp.sum(grad * grad))


_jitted = jax.jit(_step)
_retracing = jax.jit(_step, static_argnums=3)


def make_run(retrace: bool):
    step_fn = _retracing if retrace else _jitted

    def run(batches):
        w = jnp.full((4, 1), 0.1, jnp.float32)
        history = []
        for step, batch in enumerate(batches):
            args = (w, batch["x"], batch["y"]) + ((step,) if retrace else ())
            w, loss, grad_norm = step_fn(*args)
            loss, grad_norm = float(loss), float(grad_norm)  # one host sync per step
            check_finite(step, loss, grad_norm)
            history.append((loss, grad_norm))
        return history

    return run


def make_clean_batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = (rng.random((8, 1)) < 0.5).astype(np.float32)
    return {"x": x, "y": y}


def make_trainer(retrace: bool = False) -> TrainerUnderTest:
    """Described by one example batch: the shapes are not written twice."""
    return TrainerUnderTest.from_example(
        make_clean_batch(np.random.default_rng(0)),
        make_run(retrace),
        compile_count=count_traces(_retracing if retrace else _jitted),
    )
