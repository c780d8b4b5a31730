"""The one small data set and config the multi-process tests and their references share."""

from __future__ import annotations

import numpy as np
from trainer.conftest import small_config

from nozero_trainer.config import TrainConfig

ROWS, DIM = 50, 16
# Where the rows split between processes (unequal on purpose: shares need not match).
SPLIT = {1: (0, ROWS), 2: (0, 29, ROWS)}


def config(**overrides) -> TrainConfig:
    """The trainer tests' small config (fixed shapes: compiles are shared)."""
    return small_config(**overrides)


def dataset(poison_row: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    y = (rng.random((ROWS, len(config().heads))) < 0.3).astype(np.float32)
    if poison_row is not None:
        x[poison_row, 3] = np.inf
    return x, y
