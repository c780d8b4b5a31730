"""The one small data set and config the multi-process tests and their references share."""

from __future__ import annotations

import numpy as np

from nozero_trainer.config import TrainConfig

ROWS, DIM = 50, 16
# Where the rows split between processes (unequal on purpose: shares need not match).
SPLIT = {1: (0, ROWS), 2: (0, 29, ROWS)}


def config(**overrides) -> TrainConfig:
    settings = dict(
        steps=12,
        batch_size=8,
        warmup_steps=2,
        hidden_dims=(16,),
        chunk_steps=4,
        sync_every=4,
        eval_every=0,
        peak_lr=1e-2,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


def dataset(poison_row: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    y = (rng.random((ROWS, len(config().heads))) < 0.3).astype(np.float32)
    if poison_row is not None:
        x[poison_row, 3] = np.inf
    return x, y
