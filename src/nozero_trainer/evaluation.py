"""Holdout evaluation: per-head probabilities, PR-AUC beside its chance level, and the table.

A head without holdout positives has no PR-AUC (it is undefined, not 0): its value is
``None`` and :data:`NO_POSITIVES` says why, in the table and in the run's JSON files.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from nozero_trainer.data import Split
from nozero_trainer.metrics import average_precision
from nozero_trainer.model import Params, apply_model

NO_POSITIVES = "no positives in the holdout: PR-AUC is undefined"


@dataclasses.dataclass
class Evaluation:
    """Per-head holdout results; ``None`` PR-AUC where a head has no positives."""

    pr_auc: dict[str, float | None]
    positives: dict[str, int]
    positive_rate: dict[str, float]

    def undefined(self) -> dict[str, str]:
        """Why each head without a PR-AUC has none."""
        return {head: NO_POSITIVES for head, value in self.pr_auc.items() if value is None}


_score = jax.jit(lambda params, x: jax.nn.sigmoid(apply_model(params, x)))


def predict(params: Params, cls: np.ndarray) -> np.ndarray:
    """Per-head probabilities ``[n, H]`` for embeddings ``cls``."""
    return np.asarray(_score(params, cls))


def evaluate(params: Params, split: Split) -> Evaluation:
    """Average precision of every head on ``split``."""
    ap = average_precision(predict(params, split.cls), split.labels)
    positives = split.labels.sum(axis=0)
    rows = max(len(split), 1)
    return Evaluation(
        pr_auc={
            h: float(v) if math.isfinite(v) else None
            for h, v in zip(split.heads, ap.tolist(), strict=True)
        },
        positives={h: int(p) for h, p in zip(split.heads, positives, strict=True)},
        positive_rate={h: float(p) / rows for h, p in zip(split.heads, positives, strict=True)},
    )


def format_evaluation(evaluation: Evaluation) -> str:
    """A table of every head's holdout PR-AUC beside its positive rate (the chance level)."""
    lines = [f"{'head':<22}{'positives':>10}{'pos. rate':>11}{'PR-AUC':>9}{'x chance':>10}"]
    for head, ap in evaluation.pr_auc.items():
        rate = evaluation.positive_rate[head]
        start = f"{head:<22}{evaluation.positives[head]:>10}{rate:>11.4f}"
        if ap is None:
            lines.append(f"{start}{'-':>9}{'-':>10}  ({NO_POSITIVES})")
        else:
            lines.append(f"{start}{ap:>9.4f}{ap / rate:>10.1f}")
    return "\n".join(lines)
