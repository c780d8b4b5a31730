"""Synthetic shards in the training schema, with the flaws real data has.

The data is learnable (each head has a direction in embedding space that its positives
lean towards), imbalanced (one rare head), and dirty on purpose: a share of rows has
weak labels and a share has NaN/Inf embeddings, so the loader's drops are exercised.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nozero_trainer.heads import DEFAULT_HEADS, EMPTY_LABEL_HEAD

# Share of rows per bot head; the rest are legitimate (empty label list). RTBot is rare.
BOT_RATES = {
    "FollowBot": 0.10,
    "LikeBot": 0.08,
    "EngagementAmplifier": 0.06,
    "ReplySpamBot": 0.05,
    "TweetSpamBot": 0.05,
    "RTBot": 0.01,
    "MultiActionBot": 0.04,
}
SOURCES = np.array(["manual_review", "heuristic", "report"])


def _labels_for(rng: np.random.Generator, rows: int, bots: list[str]) -> np.ndarray:
    """Multi-hot ``[rows, len(bots)]``: independent per head, so some rows get two labels."""
    rates = np.array([BOT_RATES.get(b, 0.05) for b in bots])
    return rng.random((rows, len(bots))) < rates


def _list_array(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), values)


def _write_split(
    out: Path,
    user_ids: np.ndarray,
    cls: np.ndarray,
    hot: np.ndarray,
    bots: list[str],
    rng: np.random.Generator,
    shards: int,
    non_strong_fraction: float,
) -> None:
    out.mkdir(parents=True)
    rows, dim = cls.shape
    names = np.array(bots, dtype=object)
    hot_cols = np.nonzero(hot)[1]  # row-major: each row's labels stay together, in order
    label_offsets = np.r_[0, np.cumsum(hot.sum(axis=1))]
    strength = np.where(rng.random(rows) < non_strong_fraction, "weak", "strong")
    source = SOURCES[rng.integers(0, SOURCES.size, rows)]
    bounds = np.linspace(0, rows, shards + 1).astype(int)
    for shard, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        lo, hi = label_offsets[start], label_offsets[stop]
        table = pa.table(
            {
                "user_id": pa.array(user_ids[start:stop], pa.int64()),
                "cls": _list_array(
                    np.arange(stop - start + 1) * dim, pa.array(cls[start:stop].reshape(-1))
                ),
                "labels": _list_array(
                    label_offsets[start : stop + 1] - lo,
                    pa.array(names[hot_cols[lo:hi]], pa.string()),
                ),
                "label_source": pa.array(source[start:stop], pa.string()),
                "label_strength": pa.array(strength[start:stop], pa.string()),
            }
        )
        pq.write_table(table, out / f"part-{shard:05d}.parquet")


def make_data(
    out_dir: str | Path,
    rows: int,
    dim: int,
    seed: int = 0,
    *,
    shards: int = 4,
    holdout_fraction: float = 0.2,
    non_strong_fraction: float = 0.1,
    non_finite_fraction: float = 0.01,
    signal: float = 2.5,
    heads: tuple[str, ...] = DEFAULT_HEADS,
) -> Path:
    """Write ``OUT/train`` and ``OUT/holdout`` shards; returns ``OUT``.

    ``signal`` is how far (in noise standard deviations) a head's positives lean along
    its direction. The directory appears complete or not at all: it is written under a
    temporary name and renamed into place; an existing non-empty ``OUT`` is refused.
    """
    out_dir = Path(out_dir)
    if rows < 10 or dim < 1 or shards < 1:
        raise ValueError(
            f"make_data: need rows >= 10, dim >= 1, shards >= 1 (got {rows}, {dim}, {shards})"
        )
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ValueError(f"{out_dir}: exists and is not empty; refusing to overwrite")
    rng = np.random.default_rng(seed)
    bots = [h for h in heads if h != EMPTY_LABEL_HEAD]
    hot = _labels_for(rng, rows, bots)
    directions = rng.standard_normal((len(bots), dim)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    cls = rng.standard_normal((rows, dim), dtype=np.float32)
    cls += signal * (hot.astype(np.float32) @ directions)
    poisoned = np.flatnonzero(rng.random(rows) < non_finite_fraction)
    cls[poisoned, rng.integers(0, dim, poisoned.size)] = rng.choice(
        np.array([np.nan, np.inf, -np.inf], np.float32), poisoned.size
    )
    user_ids = rng.permutation(rows).astype(np.int64) + 1_000_000
    n_holdout = max(1, int(rows * holdout_fraction))

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, part in (("holdout", slice(0, n_holdout)), ("train", slice(n_holdout, rows))):
            split_shards = max(1, min(shards, (part.stop - part.start) // 2))
            _write_split(
                tmp / name,
                user_ids[part],
                cls[part],
                hot[part],
                bots,
                rng,
                split_shards,
                non_strong_fraction,
            )
        if out_dir.exists():
            out_dir.rmdir()
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
