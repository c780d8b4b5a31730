"""Shared fixtures: small configs and real parquet shards written with pyarrow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nozero_trainer.config import TrainConfig
from nozero_trainer.synthetic import make_data

DIM = 16
HEADS = 8


def small_config(**overrides) -> TrainConfig:
    """A tiny but complete config: shapes small and fixed so compiles are shared."""
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


def write_shard(path: Path, rows: list[dict], *, schema: pa.Schema | None = None) -> Path:
    """Write ``rows`` (dicts of the five columns) as one real parquet shard."""
    schema = schema or pa.schema(
        [
            ("user_id", pa.int64()),
            ("cls", pa.list_(pa.float32())),
            ("labels", pa.list_(pa.string())),
            ("label_source", pa.string()),
            ("label_strength", pa.string()),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def random_rows(rng: np.random.Generator, n: int, start_id: int, dim: int = DIM) -> list[dict]:
    """Rows with every kind of flaw the loader must handle, in known places."""
    choices = [
        [],
        ["FollowBot"],
        ["RTBot", "LikeBot"],
        ["MysteryBot"],
        ["LikeBot", "Nope"],
        ["MultiActionBot"],
        ["EngagementAmplifier", "ReplySpamBot", "TweetSpamBot"],
    ]
    rows = []
    for i in range(n):
        cls = rng.standard_normal(dim).astype(np.float32)
        if i % 7 == 3:
            cls[i % dim] = [np.nan, np.inf, -np.inf][i % 3]
        rows.append(
            {
                "user_id": start_id + i,
                "cls": cls.tolist(),
                "labels": choices[i % len(choices)],
                "label_source": ["manual", "heuristic"][i % 2],
                "label_strength": "weak" if i % 5 == 1 else "strong",
            }
        )
    return rows


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory) -> Path:
    """A small make-data dataset shared by the end-to-end tests."""
    return make_data(tmp_path_factory.mktemp("synthetic") / "data", rows=1200, dim=DIM, seed=3)


@pytest.fixture
def toy_arrays(rng) -> tuple[np.ndarray, np.ndarray]:
    """In-memory training arrays with a learnable signal."""
    x = rng.standard_normal((96, DIM)).astype(np.float32)
    y = (x[:, :HEADS] > 0.5).astype(np.float32)
    return x, y


def batches_from(x: np.ndarray, y: np.ndarray, count: int, size: int = 8) -> list[dict]:
    """``count`` consecutive batches of ``size`` rows (copies, safe to poison)."""
    return [
        {"cls": x[i * size : (i + 1) * size].copy(), "labels": y[i * size : (i + 1) * size].copy()}
        for i in range(count)
    ]
