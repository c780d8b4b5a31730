"""Plain-numpy trainers for the plugin's own tests: one correct, one per known way to break
the rule. Logistic regression in float32; each run starts from the same fresh weights.

This file is copied into ``pytester`` directories and imported there by name.
"""

from __future__ import annotations

import math

import numpy as np

from nozero import NonFiniteError, check_finite
from nozero.testing import TrainerUnderTest

BATCH_SPEC = {"x": ((8, 4), np.float32), "y": ((8, 1), np.float32)}
BROKEN = (
    "nan_to_num",
    "skip_nan_loss",
    "check_every_500",
    "catch_and_continue",
    "keep_old_params",
    "value_error",
    "loss_only",
)


def make_clean_batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = (rng.random((8, 1)) < 0.5).astype(np.float32)
    return {"x": x, "y": y}


def loss_and_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, float]:
    """Binary cross-entropy of a linear model; the grad norm is float32, like most trainers."""
    with np.errstate(all="ignore"):
        z = x @ w
        loss = float(np.mean(np.logaddexp(0, z) - y * z))
        prob = 0.5 * (1 + np.tanh(z / 2))
        grad = x.T @ (prob - y) / len(x)
        grad_norm = float(np.sqrt(np.sum(grad * grad)))
    return loss, grad, grad_norm


def make_run(bug: str = "correct"):
    """``run(batches)`` for the named behaviour; returns the (loss, grad_norm) history."""

    def run(batches: list[dict[str, np.ndarray]]) -> list[tuple[float, float]]:
        w = np.full((4, 1), 0.1, np.float32)
        history = []
        last = len(batches) - 1
        for step, batch in enumerate(batches):
            x, y = batch["x"], batch["y"]
            if bug == "standardize":  # divides by a column's spread: constant columns -> NaN
                with np.errstate(all="ignore"):
                    x = (x - x.mean(axis=0)) / x.std(axis=0)
            loss, grad, grad_norm = loss_and_grad(w, x, y)
            finite = math.isfinite(loss) and math.isfinite(grad_norm)
            if bug == "nan_to_num":
                grad = np.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0)
                grad_norm = float(np.sqrt(np.sum(grad * grad)))
            elif bug == "skip_nan_loss" and not math.isfinite(loss):
                continue
            elif bug == "check_every_500":
                if step % 500 == 0 or step == last:
                    check_finite(step, loss, grad_norm)
            elif bug == "catch_and_continue":
                try:
                    check_finite(step, loss, grad_norm)
                except NonFiniteError:
                    pass
            elif bug == "keep_old_params" and not finite:
                history.append((loss, grad_norm))
                continue
            elif bug == "value_error" and not finite:
                raise ValueError(f"loss became {loss} at step {step}")
            elif bug == "loss_only" and not math.isfinite(loss):
                raise NonFiniteError(step, loss, grad_norm)
            elif bug == "one_based_step" and not finite:
                raise NonFiniteError(step + 1, loss, grad_norm)
            elif bug == "stale_values" and not finite:
                raise NonFiniteError(step, *(history[-1] if history else (0.0, 0.0)))
            elif bug in ("correct", "standardize", "skip_nan_loss", "keep_old_params"):
                check_finite(step, loss, grad_norm)
            with np.errstate(all="ignore"):
                w = w - 0.5 * grad
            history.append((loss, grad_norm))
        return history

    return run


def make_trainer(bug: str = "correct", **options) -> TrainerUnderTest:
    return TrainerUnderTest(
        batch_spec=BATCH_SPEC, run=make_run(bug), make_clean_batch=make_clean_batch, **options
    )


def correct() -> TrainerUnderTest:
    """A factory for the ini option ``nozero_trainer = numpy_trainers:correct``."""
    return make_trainer()
