"""The reference trainer as ``pytest --nozero`` sees it (``nozero_trainer`` in pyproject).

Small, fixed shapes keep the contract run fast and let every example reuse one compiled
step; the settings are otherwise the trainer's own defaults (MLP head, focal loss with
class-balanced weights, clipped AdamW), so the contract tests the real guard.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nozero.testing import TrainerUnderTest
from nozero_trainer.config import TrainConfig
from nozero_trainer.loop import compile_count, train_on_batches

BATCH = 8
IN_DIM = 16
# Positives per head in an imagined training set of N_ROWS rows: turns class weighting on.
N_ROWS = 1000
POSITIVE_RATE = 0.2


def contract_config() -> TrainConfig:
    """The defaults, shrunk: a narrow hidden layer and a warm-up that fits a short run."""
    return dataclasses.replace(TrainConfig(), hidden_dims=(32,), warmup_steps=2, batch_size=BATCH)


def make_clean_batch(rng: np.random.Generator, n_heads: int) -> dict[str, np.ndarray]:
    """Unit-normal embeddings and multi-hot labels, as the loader produces them."""
    cls = rng.standard_normal((BATCH, IN_DIM)).astype(np.float32)
    labels = (rng.random((BATCH, n_heads)) < POSITIVE_RATE).astype(np.float32)
    return {"cls": cls, "labels": labels}


def reference_trainer() -> TrainerUnderTest:
    """Factory named by ``nozero_trainer = nozero_trainer.contract_target:reference_trainer``."""
    config = contract_config()
    n_heads = len(config.heads)
    class_counts = np.full(n_heads, POSITIVE_RATE * N_ROWS)

    def run(batches: list[dict[str, np.ndarray]]) -> list[tuple[float, float]]:
        result = train_on_batches(
            config,
            batches,
            in_dim=IN_DIM,
            n_heads=n_heads,
            class_counts=class_counts,
            n_rows=N_ROWS,
        )
        return result.history

    return TrainerUnderTest(
        batch_spec={
            "cls": ((BATCH, IN_DIM), np.float32),
            "labels": ((BATCH, n_heads), np.float32),
        },
        run=run,
        check_every=1,  # the guard reports the exact step
        make_clean_batch=lambda rng: make_clean_batch(rng, n_heads),
        vary_fields=("cls",),  # labels are multi-hot: rescaling them is not clean data
        compile_count=compile_count,
    )
