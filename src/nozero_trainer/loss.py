"""The loss: masked multi-label symmetric cross-entropy with focal weighting.

Per head ``h`` and row ``i`` with logit ``z``, ``p = sigmoid(z)``, multi-hot target ``y``
and smoothed target ``t = y (1 - eps) + eps / 2``::

    bce   = -(t log p + (1 - t) log(1 - p))
    rce   = -(p log t + (1 - p) log(1 - t)),  log clamped below at LOG_CLAMP (log 0 = -inf)
    focal = (1 - p_y) ** gamma,  p_y = the probability given to the true label y
    alpha = alpha if y else 1 - alpha   (1 when alpha is unset)
    term  = alpha * focal * (bce + reverse_ce_weight * rce)

    loss  = sum_{i,h} mask_h * weight_h * term_ih / (rows * sum_h mask_h)

Everything is written in log space from ``softplus`` so saturated logits (|z| = 100)
keep finite values and gradients at every gamma >= 0.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Symmetric cross-entropy (Wang et al., 2019) clamps log 0 of the one-hot target at -4.
LOG_CLAMP = -4.0


def multilabel_focal_loss(
    logits: jax.Array,
    labels: jax.Array,
    *,
    head_weights: jax.Array,
    head_mask: jax.Array,
    focal_gamma: float,
    focal_alpha: float | None = None,
    label_smoothing: float = 0.0,
    reverse_ce_weight: float = 0.0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Scalar loss and stats (``focal_mean_weight``, ``bce``, ``rce``, ``per_head``)."""
    y = labels.astype(logits.dtype)
    log_p = -jax.nn.softplus(-logits)  # log sigmoid(z), stable for any z
    log_not_p = -jax.nn.softplus(logits)  # log(1 - sigmoid(z))
    p = jnp.exp(log_p)

    target = y * (1.0 - label_smoothing) + 0.5 * label_smoothing
    bce = -(target * log_p + (1.0 - target) * log_not_p)
    log_t = jnp.maximum(jnp.log(jnp.maximum(target, 1e-30)), LOG_CLAMP)
    log_not_t = jnp.maximum(jnp.log(jnp.maximum(1.0 - target, 1e-30)), LOG_CLAMP)
    rce = -(p * log_t + (1.0 - p) * log_not_t)

    # (1 - p_y) ** gamma as exp(gamma * log(1 - p_y)): the power form has an infinite
    # derivative at p_y = 1 for gamma < 1; the log form's derivative is finite everywhere.
    log_one_minus_py = y * log_not_p + (1.0 - y) * log_p
    focal = jnp.exp(focal_gamma * log_one_minus_py)
    term = focal * (bce + reverse_ce_weight * rce)
    if focal_alpha is not None:
        term = term * (y * focal_alpha + (1.0 - y) * (1.0 - focal_alpha))

    rows = logits.shape[0]
    weight = head_mask * head_weights
    per_head = jnp.sum(term, axis=0) / rows
    active = jnp.sum(head_mask)
    loss = jnp.sum(per_head * weight) / active
    mask_rows = jnp.broadcast_to(head_mask, focal.shape)
    n_active = rows * active
    stats = {
        "focal_mean_weight": jnp.sum(focal * mask_rows) / n_active,
        "bce": jnp.sum(bce * mask_rows) / n_active,
        "rce": jnp.sum(rce * mask_rows) / n_active,
        "per_head": per_head,
    }
    return loss, stats


def class_balanced_weights(
    label_counts: np.ndarray | Any, n_rows: int, head_mask: np.ndarray | None = None
) -> np.ndarray:
    """Per-head weights from training label counts (Cui et al., 2019, effective number).

    ``w_h = (1 - beta) / (1 - beta ** n_h)`` with ``beta = (N - 1) / N`` for ``N`` training
    rows, normalised so the active heads' weights average 1. Rare heads weigh more,
    growing sub-linearly as counts fall. A head with ``n_h = 0`` would get an infinite
    weight: it must be masked out (weight 0) or refused beforehand by ``validate``.
    """
    counts = np.asarray(label_counts, dtype=np.float64)
    mask = np.ones_like(counts) if head_mask is None else np.asarray(head_mask, np.float64)
    if np.any((counts <= 0) & (mask > 0)):
        raise ValueError("class_balanced_weights: an active head has zero positive examples")
    beta = (n_rows - 1.0) / n_rows if n_rows > 1 else 0.0
    safe = np.where(mask > 0, counts, 1.0)
    raw = (1.0 - beta) / (1.0 - beta**safe) if beta > 0 else np.ones_like(counts)
    raw = raw * mask
    return (raw * mask.sum() / raw.sum()).astype(np.float32)


def head_weighting(
    class_weighting: bool,
    label_counts: np.ndarray | None,
    n_rows: int | None,
    n_heads: int,
    mask_zero_positive_heads: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-head ``(weights, mask)`` for :func:`multilabel_focal_loss`.

    Without class weighting (or without counts) every head weighs 1. With it, a head
    with zero positives is masked out when allowed, otherwise refused by name upstream
    (``config.validate``) and here as a last line of defence.
    """
    mask = np.ones(n_heads, np.float32)
    if not class_weighting or label_counts is None:
        return np.ones(n_heads, np.float32), mask
    counts = np.asarray(label_counts, dtype=np.float64)
    if mask_zero_positive_heads:
        mask = (counts > 0).astype(np.float32)
    rows = int(n_rows) if n_rows is not None else int(max(counts.sum(), 1))
    return class_balanced_weights(counts, rows, mask), mask
