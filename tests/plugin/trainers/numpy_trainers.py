"""Plain-numpy trainers for the plugin's own tests: one correct, one per known way to break
the rule. Logistic regression in float32; each run starts from the same fresh weights.

This file is copied into ``pytester`` directories and imported there by name.
"""

from __future__ import annotations

import math

import numpy as np

from nozero import NonFiniteError, check_finite, format_message
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
    "loss_only_returns_none",
    "retries_forever",
    "one_based_step",
    "ascii_hyphen",
    "checkify_suffix",
    "type_error",
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


def _accumulating_run(bug: str, per_update: int):
    """Averages the gradients of ``per_update`` batches per optimizer step; ``bug``
    "micro_steps" reports the batch index in the documented error, not the step."""

    def run(batches: list[dict[str, np.ndarray]]) -> list[tuple[float, float]]:
        w = np.full((4, 1), 0.1, np.float32)
        history = []
        for step in range(len(batches) // per_update):
            group = batches[step * per_update : (step + 1) * per_update]
            results = [loss_and_grad(w, b["x"], b["y"]) for b in group]
            loss = float(np.mean([r[0] for r in results]))
            with np.errstate(all="ignore"):
                grad = sum(r[1] for r in results) / per_update
                grad_norm = float(np.sqrt(np.sum(grad * grad)))
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                bad = [i for i, r in enumerate(results) if not math.isfinite(r[0] + r[2])]
                at = step * per_update + bad[0] if bug == "micro_steps" and bad else step
                raise NonFiniteError(at, loss, grad_norm)
            w = w - 0.5 * grad
            history.append((loss, grad_norm))
        return history

    return run


def make_run(bug: str = "correct"):
    """``run(batches)`` for the named behaviour; returns the (loss, grad_norm) history."""
    if bug in ("accumulates", "micro_steps"):
        return _accumulating_run(bug, per_update=2)

    def run(batches: list[dict[str, np.ndarray]]) -> list[tuple[float, float]]:
        w = np.full((4, 1), 0.1, np.float32)
        history = []
        last = len(batches) - 1
        if bug == "type_error":
            raise TypeError("unsupported operand type(s) for +: 'dict' and 'int'")
        for step, batch in enumerate(batches):
            x, y = batch["x"], batch["y"]
            if bug == "squared_error":  # no clipping: large inputs make SGD diverge
                with np.errstate(all="ignore"):
                    residual = x @ w - y
                    loss = float(np.mean(residual**2))
                    grad = 2 * x.T @ residual / len(x)
                    grad_norm = float(np.sqrt(np.sum(grad * grad)))
                check_finite(step, loss, grad_norm)
                w = w - 0.1 * grad
                history.append((loss, grad_norm))
                continue
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
            elif bug == "loss_only_returns_none":
                if not math.isfinite(loss):
                    raise NonFiniteError(step, loss, grad_norm)
                grad = np.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0)
            elif bug == "retries_forever":
                while not (math.isfinite(loss) and math.isfinite(grad_norm)):
                    loss, grad, grad_norm = loss_and_grad(w, x, y)  # "a transient glitch"
            elif bug == "ascii_hyphen" and not finite:
                message = format_message(step, loss, grad_norm).replace("\u2014", "-")
                raise RuntimeError(message)
            elif bug == "checkify_suffix" and not finite:
                raise RuntimeError(format_message(step, loss, grad_norm) + " (`check` failed)")
            elif bug == "stale_values" and not finite:
                raise NonFiniteError(step, *(history[-1] if history else (0.0, 0.0)))
            elif bug in ("correct", "standardize", "skip_nan_loss", "keep_old_params", "model"):
                check_finite(step, loss, grad_norm)
            with np.errstate(all="ignore"):
                w = w - 0.5 * grad
            history.append((loss, grad_norm))
        if bug == "loss_only_returns_none":
            return None
        if bug == "model":  # returns what it trained, as many trainers do
            return {"linear": {"w": w, "b": np.zeros(1, np.float32)}}
        return history

    return run


def make_trainer(bug: str = "correct", **options) -> TrainerUnderTest:
    return TrainerUnderTest(
        batch_spec=BATCH_SPEC, run=make_run(bug), make_clean_batch=make_clean_batch, **options
    )


def correct() -> TrainerUnderTest:
    """A factory for the ini option ``nozero_trainer = numpy_trainers:correct``."""
    return make_trainer()
