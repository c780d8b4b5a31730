"""The loss against a float64 numpy reference, its focal limits and saturated gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nozero_trainer.loss import (
    LOG_CLAMP,
    class_balanced_weights,
    head_weighting,
    multilabel_focal_loss,
)


def reference_loss(z, y, weights, mask, gamma, alpha, smoothing, rce_weight):
    """The formulas of the loss module's docstring, in float64 and written naively."""
    z, y = z.astype(np.float64), y.astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-z))
    t = y * (1 - smoothing) + smoothing / 2
    bce = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    with np.errstate(divide="ignore"):
        log_t, log_not_t = np.log(t), np.log(1 - t)
    rce = -(p * np.maximum(log_t, LOG_CLAMP) + (1 - p) * np.maximum(log_not_t, LOG_CLAMP))
    p_true = np.where(y == 1, p, 1 - p)
    focal = (1 - p_true) ** gamma
    a = 1.0 if alpha is None else np.where(y == 1, alpha, 1 - alpha)
    term = a * focal * (bce + rce_weight * rce)
    per_head = term.mean(axis=0)
    return np.sum(per_head * weights * mask) / mask.sum(), focal


def _loss(z, y, weights, mask, gamma, alpha, smoothing, rce_weight):
    return multilabel_focal_loss(
        jnp.asarray(z),
        jnp.asarray(y),
        head_weights=jnp.asarray(weights),
        head_mask=jnp.asarray(mask),
        focal_gamma=gamma,
        focal_alpha=alpha,
        label_smoothing=smoothing,
        reverse_ce_weight=rce_weight,
    )


@pytest.mark.parametrize("seed", range(6))
def test_matches_float64_reference(seed):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((32, 8)) * 3).astype(np.float32)
    y = (rng.random((32, 8)) < 0.3).astype(np.float32)
    weights = rng.uniform(0.2, 3, 8).astype(np.float32)
    mask = (rng.random(8) < 0.8).astype(np.float32)
    mask[0] = 1
    gamma = float(rng.choice([0.0, 0.5, 1.0, 2.0, 3.7]))
    alpha = None if seed % 2 else float(rng.uniform(0, 1))
    smoothing = float(rng.choice([0.0, 0.1]))
    rce_weight = float(rng.uniform(0, 1))
    loss, stats = _loss(z, y, weights, mask, gamma, alpha, smoothing, rce_weight)
    want, focal = reference_loss(z, y, weights, mask, gamma, alpha, smoothing, rce_weight)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    active = mask.astype(bool)
    np.testing.assert_allclose(
        float(stats["focal_mean_weight"]), focal[:, active].mean(), rtol=1e-5
    )


def test_gamma_zero_is_the_unfocused_loss():
    rng = np.random.default_rng(7)
    z = rng.standard_normal((16, 8)).astype(np.float32)
    y = (rng.random((16, 8)) < 0.5).astype(np.float32)
    ones = np.ones(8, np.float32)
    loss, stats = _loss(z, y, ones, ones, 0.0, None, 0.0, 0.3)
    unfocused = float(stats["bce"]) + 0.3 * float(stats["rce"])
    np.testing.assert_allclose(float(loss), unfocused, rtol=1e-6)
    assert float(stats["focal_mean_weight"]) == 1.0
    # And a positive gamma really down-weights: the focal mean weight drops below 1.
    _, focused = _loss(z, y, ones, ones, 2.0, None, 0.0, 0.3)
    assert float(focused["focal_mean_weight"]) < 1.0


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("alpha, smoothing", [(None, 0.0), (0.25, 0.1)])
def test_gradients_finite_at_saturated_logits(gamma, alpha, smoothing):
    # Every combination of confident-right and confident-wrong saturated logits.
    z = np.array([[100.0, -100.0, 100.0, -100.0]], np.float32)
    y = np.array([[1.0, 0.0, 0.0, 1.0]], np.float32)
    ones = np.ones(4, np.float32)

    def total(logits):
        return _loss(logits, y, ones, ones, gamma, alpha, smoothing, 0.5)[0]

    value, grad = jax.value_and_grad(total)(jnp.asarray(z))
    assert np.isfinite(float(value))
    assert np.isfinite(np.asarray(grad)).all(), grad


def test_class_balanced_weights_formula():
    counts = np.array([1000.0, 100.0, 10.0, 0.0])
    mask = np.array([1.0, 1.0, 1.0, 0.0])
    weights = class_balanced_weights(counts, 10_000, mask)
    beta = 9_999 / 10_000
    raw = (1 - beta) / (1 - beta ** counts[:3])
    np.testing.assert_allclose(weights[:3], raw / raw.mean(), rtol=1e-6)
    assert weights[3] == 0.0
    assert weights[2] > weights[1] > weights[0]
    with pytest.raises(ValueError, match="zero positive"):
        class_balanced_weights(counts, 10_000)


def test_head_weighting_masks_or_stays_uniform():
    counts = np.array([5.0, 0.0, 3.0])
    weights, mask = head_weighting(True, counts, 50, 3, mask_zero_positive_heads=True)
    assert mask.tolist() == [1.0, 0.0, 1.0] and weights[1] == 0.0
    assert np.isfinite(weights).all()
    weights, mask = head_weighting(False, counts, 50, 3)
    assert weights.tolist() == [1.0, 1.0, 1.0] and mask.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError):
        head_weighting(True, counts, 50, 3)
