"""The parquet loader against a plain reference, and every error path it promises."""

from __future__ import annotations

import math
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nozero_trainer import data
from nozero_trainer.data import load_dataset, load_split
from nozero_trainer.heads import DEFAULT_HEADS

from .conftest import DIM, random_rows, write_shard


def reference_load(rows: list[dict]):
    """The obvious per-row loader, written independently of the real one."""
    ids, cls, hot, unknown = [], [], [], {}
    for row in rows:
        if row["label_strength"] != "strong":
            continue
        if not all(math.isfinite(v) for v in row["cls"]):
            continue
        ids.append(row["user_id"])
        cls.append(row["cls"])
        vec = [0.0] * len(DEFAULT_HEADS)
        for label in row["labels"]:
            if label in DEFAULT_HEADS:
                vec[DEFAULT_HEADS.index(label)] = 1.0
            else:
                unknown[label] = unknown.get(label, 0) + 1
        if not row["labels"]:
            vec[DEFAULT_HEADS.index("LegitimateUser")] = 1.0
        hot.append(vec)
    return np.array(ids), np.array(cls, np.float32), np.array(hot, np.float32), unknown


@pytest.fixture(params=[4096, 7], ids=["one-batch", "batches-of-7"])
def batch_rows(request, monkeypatch):
    """Run a test with the default batch size and with tiny batches crossing rows."""
    monkeypatch.setattr(data, "BATCH_ROWS", request.param)
    return request.param


def test_loader_equals_reference(tmp_path, rng, batch_rows):
    shards = [random_rows(rng, 40, 0), random_rows(rng, 33, 1000), random_rows(rng, 5, 2000)]
    for i, rows in enumerate(shards):
        write_shard(tmp_path / "train" / f"part-{i}.parquet", rows)
    split = load_split(tmp_path / "train")
    all_rows = [r for rows in shards for r in rows]
    ids, cls, hot, unknown = reference_load(all_rows)
    np.testing.assert_array_equal(split.user_id, ids)
    np.testing.assert_array_equal(split.cls, cls)
    np.testing.assert_array_equal(split.labels, hot)
    assert split.user_id.dtype == np.int64 and split.cls.dtype == np.float32
    assert split.stats.unknown_labels == unknown and unknown  # counted, not silently dropped
    assert split.stats.rows_read == len(all_rows)
    strong = [r for r in all_rows if r["label_strength"] == "strong"]
    assert split.stats.non_strong_dropped == len(all_rows) - len(strong)
    assert split.stats.non_finite_dropped == len(strong) - len(ids) > 0
    kept = [r for r in strong if all(math.isfinite(v) for v in r["cls"])]
    assert split.label_lists.to_pylist() == [r["labels"] for r in kept]
    assert split.label_source.to_pylist() == [r["label_source"] for r in kept]


def test_shards_with_only_dropped_rows_and_sliced_lists(tmp_path, rng):
    rows = random_rows(rng, 20, 0)
    for r in rows:
        r["label_strength"] = "weak"
    write_shard(tmp_path / "a.parquet", rows)
    good = random_rows(rng, 20, 100)
    # A table written from a slice exercises list offsets that do not start at 0.
    table = pa.Table.from_pylist(good, schema=pq.read_schema(tmp_path / "a.parquet"))
    table = table.slice(3, 10)
    pq.write_table(table, tmp_path / "b.parquet")
    split = load_split(tmp_path)
    weak_in_slice = sum(r["label_strength"] != "strong" for r in good[3:13])
    assert split.stats.non_strong_dropped == 20 + weak_in_slice
    ids, cls, _, _ = reference_load(good[3:13])
    np.testing.assert_array_equal(split.user_id, ids)
    np.testing.assert_array_equal(split.cls, cls)


def _one_row(**change):
    row = {
        "user_id": 1,
        "cls": [0.0] * DIM,
        "labels": [],
        "label_source": "s",
        "label_strength": "strong",
    }
    row.update(change)
    return row


def test_missing_directory_and_no_shards(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_split(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty: no \*\.parquet shards"):
        load_split(tmp_path / "empty")
    with pytest.raises(ValueError, match="data directory does not exist"):
        load_dataset(tmp_path / "nothing")


def test_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "s" / "part-0.parquet"
    path.parent.mkdir()
    pq.write_table(
        pa.table({"user_id": [1], "cls": [[0.0]], "labels": [["x"]], "label_source": ["s"]}), path
    )
    with pytest.raises(ValueError, match=r"part-0\.parquet: missing column 'label_strength'"):
        load_split(path.parent)


@pytest.mark.parametrize(
    "column, arrow_type, value",
    [
        ("user_id", pa.string(), "u1"),
        ("cls", pa.list_(pa.float64()), [0.0] * DIM),
        ("labels", pa.string(), "FollowBot"),
        ("label_strength", pa.int32(), 1),
    ],
)
def test_wrong_column_type_names_file_and_column(tmp_path, column, arrow_type, value):
    base = pa.schema(
        [
            ("user_id", pa.int64()),
            ("cls", pa.list_(pa.float32())),
            ("labels", pa.list_(pa.string())),
            ("label_source", pa.string()),
            ("label_strength", pa.string()),
        ]
    )
    schema = base.set(base.get_field_index(column), pa.field(column, arrow_type))
    write_shard(tmp_path / "bad.parquet", [_one_row(**{column: value})], schema=schema)
    with pytest.raises(ValueError, match=rf"bad\.parquet: column '{column}' has type"):
        load_split(tmp_path)


def test_ragged_cls_names_file_column_and_row(tmp_path, batch_rows):
    rows = [_one_row(user_id=i) for i in range(12)]
    rows[9]["cls"] = [0.0] * (DIM - 1)
    write_shard(tmp_path / "ragged.parquet", rows)
    with pytest.raises(ValueError, match=r"ragged\.parquet: column 'cls' is ragged: row 9 "):
        load_split(tmp_path)


@pytest.mark.parametrize("bad_file, bad_row", [("a", 1), ("b", 48)])
def test_an_error_while_reading_ahead_stops_the_reader(tmp_path, monkeypatch, bad_file, bad_row):
    # One row per batch and one batch read ahead: when the error is raised the reader is
    # blocked on a full queue (mid-file, or offering its end marker after the last
    # batch) and must still stop instead of hanging the loader.
    monkeypatch.setattr(data, "BATCH_ROWS", 1)
    monkeypatch.setattr(data, "READ_AHEAD", 1)
    shards = {
        "a": [_one_row(user_id=i) for i in range(200)],
        "b": [_one_row(user_id=1000 + i) for i in range(50)],
    }
    shards[bad_file][bad_row]["cls"] = [0.0] * 2
    for name, rows in shards.items():
        write_shard(tmp_path / f"{name}.parquet", rows)
    message = rf"{bad_file}\.parquet: column 'cls' is ragged: row {bad_row} "
    with pytest.raises(ValueError, match=message):
        load_split(tmp_path)
    assert not [t for t in threading.enumerate() if t.name == "nozero-shard-reader"]


def test_width_differs_between_shards(tmp_path):
    write_shard(tmp_path / "a.parquet", [_one_row()])
    write_shard(tmp_path / "b.parquet", [_one_row(cls=[0.0] * 3)])
    with pytest.raises(ValueError, match=r"b\.parquet: column 'cls' is ragged: row 0 has width 3"):
        load_split(tmp_path)


def test_not_parquet(tmp_path):
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"junk\.parquet: not a readable parquet file"):
        load_split(tmp_path)


def test_overlapping_users_are_refused(tmp_path, rng):
    train, holdout = random_rows(rng, 10, 0), random_rows(rng, 10, 8)
    for row in train + holdout:
        row["label_strength"] = "strong"
        row["cls"] = [0.5] * DIM
    write_shard(tmp_path / "train" / "p.parquet", train)
    write_shard(tmp_path / "holdout" / "p.parquet", holdout)
    with pytest.raises(ValueError, match=r"2 user_id\(s\) appear in both train and holdout"):
        load_dataset(tmp_path)


def test_dataset_loads_both_splits(synthetic_dir):
    train, holdout = load_dataset(synthetic_dir)
    assert len(train) > len(holdout) > 0
    assert not np.intersect1d(train.user_id, holdout.user_id).size
    assert np.isfinite(train.cls).all() and np.isfinite(holdout.cls).all()
    assert train.stats.non_finite_dropped > 0 and train.stats.non_strong_dropped > 0
