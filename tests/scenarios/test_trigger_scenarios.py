"""The failures this project exists for, reproduced against the reference trainer.

Each scenario is one way a non-finite value reaches training in practice; each ends with the
documented error at the exact step, or with the bad input refused or dropped before any
step runs. Real parquet shards (pyarrow), real JAX training.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nozero import MESSAGE_PATTERN, NonFiniteError
from nozero_trainer import contract_target
from nozero_trainer.config import TrainConfig
from nozero_trainer.data import load_dataset
from nozero_trainer.heads import DEFAULT_HEADS
from nozero_trainer.loss import head_weighting
from nozero_trainer.runner import run_training

DIM = contract_target.IN_DIM
SCHEMA = pa.schema(
    [
        ("user_id", pa.int64()),
        ("cls", pa.list_(pa.float32())),
        ("labels", pa.list_(pa.string())),
        ("label_source", pa.string()),
        ("label_strength", pa.string()),
    ]
)


def small_config(**overrides) -> TrainConfig:
    settings = dict(
        steps=8,
        batch_size=8,
        warmup_steps=2,
        hidden_dims=(16,),
        chunk_steps=4,
        sync_every=4,
        eval_every=0,
        peak_lr=1e-2,
    )
    return TrainConfig(**{**settings, **overrides})


def write_split(
    split_dir: Path,
    first_user: int,
    rows: int,
    *,
    seed: int,
    bad_cls: tuple[float, ...] = (),
    heads: tuple[str, ...] = DEFAULT_HEADS,
) -> None:
    """One parquet shard: ``rows`` clean rows, then one row per value in ``bad_cls``."""
    rng = np.random.default_rng(seed)
    cls = rng.standard_normal((rows + len(bad_cls), DIM)).astype(np.float32)
    for row, value in enumerate(bad_cls, start=rows):
        cls[row, row % DIM] = value
    labels = [[heads[i % len(heads)]] for i in range(len(cls))]
    table = pa.table(
        {
            "user_id": np.arange(first_user, first_user + len(cls), dtype=np.int64),
            "cls": list(cls),
            "labels": labels,
            "label_source": ["manual_review"] * len(cls),
            "label_strength": ["strong"] * len(cls),
        },
        schema=SCHEMA,
    )
    split_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, split_dir / "part-0.parquet")


def write_dataset(root: Path, *, bad_cls=(), heads=DEFAULT_HEADS) -> Path:
    write_split(root / "train", 0, 64, seed=1, bad_cls=bad_cls, heads=heads)
    write_split(root / "holdout", 10_000, 24, seed=2, heads=heads)
    return root


def all_finite_arrays(directory: Path) -> bool:
    for path in directory.rglob("*.npz"):
        with np.load(path) as arrays:
            if not all(np.isfinite(arrays[name]).all() for name in arrays.files):
                return False
    return True


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_embedding_in_a_batch_halts_at_that_step(value):
    trainer = contract_target.reference_trainer()
    batches = trainer.clean_batches(seed=3, steps=4)
    batches[2]["cls"][5, 7] = value
    with pytest.raises(NonFiniteError) as info:
        trainer.run(batches)
    assert info.value.step == 2
    assert MESSAGE_PATTERN.fullmatch(str(info.value))
    assert not (math.isfinite(info.value.loss) and math.isfinite(info.value.grad_norm))


def test_non_finite_parquet_rows_are_dropped_counted_and_training_stays_finite(tmp_path, caplog):
    data = write_dataset(tmp_path / "data", bad_cls=(math.nan, math.nan, math.inf, -math.inf))
    with caplog.at_level(logging.INFO):
        train, _ = load_dataset(data)
    assert train.stats.non_finite_dropped == 4
    assert len(train) == 64 and np.isfinite(train.cls).all()
    assert "dropped 0 non-strong, 4 with non-finite cls" in caplog.text

    summary = run_training(small_config(), data, tmp_path / "run")
    assert summary.state.step == 8
    assert all_finite_arrays(tmp_path / "run")


def test_exploding_learning_rate_halts_and_never_checkpoints_non_finite_params(tmp_path):
    data = write_dataset(tmp_path / "data")
    out = tmp_path / "run"
    # A checkpoint after every step: the ones before the halt must all be finite.
    with pytest.raises(NonFiniteError) as info:
        run_training(small_config(peak_lr=1e30, eval_every=1), data, out)
    assert MESSAGE_PATTERN.fullmatch(str(info.value))
    assert 0 < info.value.step < 8
    assert list(out.rglob("*.npz")), "no checkpoint before the halt: nothing was checked"
    assert all_finite_arrays(out)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"focal_gamma": -0.5}, "focal_gamma must be finite and >= 0"),
        ({"focal_gamma": math.nan}, "focal_gamma must be finite and >= 0"),
        ({"focal_alpha": 1.5}, "focal_alpha must be in [0, 1]"),
        ({"focal_alpha": -0.1}, "focal_alpha must be in [0, 1]"),
    ],
)
def test_misconfigured_focal_loss_is_refused_before_training(tmp_path, setting, message):
    data = write_dataset(tmp_path / "data")
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_training(small_config(**setting), data, out)
    assert not list(out.rglob("*.npz"))  # not one step ran
    assert (
        not (out / "metrics.jsonl").exists() or "train" not in (out / "metrics.jsonl").read_text()
    )


def test_head_with_zero_positives_is_refused_or_masked_never_an_infinite_weight(tmp_path):
    present = tuple(head for head in DEFAULT_HEADS if head != "RTBot")
    data = write_dataset(tmp_path / "data", heads=present)
    with pytest.raises(ValueError, match="head 'RTBot' has zero positive training examples"):
        run_training(small_config(), data, tmp_path / "refused")

    masked = small_config(mask_zero_positive_heads=True)
    summary = run_training(masked, data, tmp_path / "masked")
    assert summary.masked_heads == ("RTBot",)
    assert all_finite_arrays(tmp_path / "masked")
    counts = load_dataset(data)[0].labels.sum(axis=0)
    weights, mask = head_weighting(True, counts, 64, len(DEFAULT_HEADS), True)
    assert np.isfinite(weights).all()
    rtbot = DEFAULT_HEADS.index("RTBot")
    assert weights[rtbot] == 0 and mask[rtbot] == 0


def test_contract_config_is_the_reference_defaults_shrunk():
    config = contract_target.contract_config()
    shrunk = {"hidden_dims", "warmup_steps", "batch_size"}
    for field in dataclasses.fields(TrainConfig):
        if field.name not in shrunk:
            assert getattr(config, field.name) == getattr(TrainConfig(), field.name), field.name
