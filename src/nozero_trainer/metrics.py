"""Per-head average precision (PR-AUC), scikit-learn's step-wise definition."""

from __future__ import annotations

import numpy as np


def _head_average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    positives = labels.sum()
    if positives <= 0:
        return float("nan")
    order = np.argsort(-scores, kind="mergesort")
    sorted_scores = scores[order]
    hits = labels[order]
    true_pos = np.cumsum(hits)
    # Tied scores share one threshold: keep only the last index of each run of ties.
    last_of_tie = np.r_[np.flatnonzero(np.diff(sorted_scores)), hits.size - 1]
    true_pos = true_pos[last_of_tie]
    predicted = last_of_tie + 1.0
    precision = true_pos / predicted
    recall = true_pos / positives
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))


def average_precision(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Average precision per head: ``sum_n (R_n - R_{n-1}) P_n`` over distinct thresholds.

    Returns float64 ``[H]``; a head without positives is ``nan`` (undefined, not 0).
    Written here because the trainer's ``[train]`` install does not ship scikit-learn.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if scores.shape != labels.shape or scores.ndim != 2:
        raise ValueError(f"scores {scores.shape} and labels {labels.shape} must be equal [n, H]")
    return np.array(
        [_head_average_precision(scores[:, h], labels[:, h]) for h in range(scores.shape[1])]
    )
