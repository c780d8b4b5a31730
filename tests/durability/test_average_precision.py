"""The trainer's average precision against scikit-learn's, including ties and degenerate heads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from nozero_trainer.metrics import average_precision


@pytest.mark.parametrize("seed", range(8))
def test_matches_sklearn_on_random_scores_with_ties(seed):
    rng = np.random.default_rng(seed)
    rows, heads = 200, 5
    scores = rng.integers(0, 12, size=(rows, heads)) / 11.0  # few distinct values: many ties
    labels = (rng.random((rows, heads)) < rng.uniform(0.02, 0.5, heads)).astype(np.float32)
    labels[0] = 1  # every head has at least one positive
    got = average_precision(scores, labels)
    want = [average_precision_score(labels[:, h], scores[:, h]) for h in range(heads)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_degenerate_heads():
    scores = np.array([[0.3, 0.3, 0.9, 0.1], [0.3, 0.7, 0.1, 0.2], [0.3, 0.1, 0.5, 0.9]])
    labels = np.array([[1, 0, 1, 1], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=np.float32)
    got = average_precision(scores, labels)
    # head 0: every score tied; head 2: every row positive; head 3: a single threshold wins.
    for head in (0, 2, 3):
        assert got[head] == pytest.approx(average_precision_score(labels[:, head], scores[:, head]))
    assert got[0] == pytest.approx(2 / 3)  # all tied: precision = positive rate
    assert got[2] == 1.0
    assert math.isnan(got[1])  # no positives: nan, never a made-up number


def test_single_row_and_constant_perfect_ranking():
    assert average_precision(np.array([[0.5]]), np.array([[1.0]]))[0] == 1.0
    scores = np.linspace(1, 0, 50)[:, None]
    labels = (np.arange(50) < 5).astype(float)[:, None]
    assert average_precision(scores, labels)[0] == 1.0
