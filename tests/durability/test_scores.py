"""The holdout scores parquet: schema, values, refusal of mismatched columns, atomic writes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nozero_trainer.data import LoadStats, Split
from nozero_trainer.scores import write_holdout_scores

HEADS = ["FollowBot", "LegitimateUser"]


def _columns(rows=3):
    return dict(
        user_id=np.arange(10, 10 + rows, dtype=np.int64),
        labels=[["FollowBot"], [], ["FollowBot", "unknown"]][:rows],
        label_source=["manual"] * rows,
        label_strength=["strong"] * rows,
        scores=np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.5]], np.float32)[:rows],
        heads=HEADS,
    )


def _split(columns):
    rows = len(columns["user_id"])
    return Split(
        user_id=columns["user_id"],
        cls=np.zeros((rows, 4), np.float32),
        labels=np.zeros((rows, len(columns["heads"])), np.float32),
        label_lists=pa.array(columns["labels"], pa.list_(pa.string())),
        label_source=pa.array(columns["label_source"]),
        label_strength=pa.array(columns["label_strength"]),
        heads=tuple(columns["heads"]),
        stats=LoadStats(shards=[]),
    )


def test_writes_source_columns_and_one_score_column_per_head(tmp_path):
    columns = _columns()
    path = write_holdout_scores(tmp_path / "scores.parquet", _split(columns), columns["scores"])
    table = pq.read_table(path)
    assert table.column_names == [
        "user_id",
        "labels",
        "label_source",
        "label_strength",
        "score_FollowBot",
        "score_LegitimateUser",
    ]
    assert table["user_id"].to_pylist() == [10, 11, 12]
    assert table["labels"].to_pylist() == [["FollowBot"], [], ["FollowBot", "unknown"]]
    np.testing.assert_allclose(table["score_LegitimateUser"].to_numpy(), [0.1, 0.8, 0.5])
    assert list(tmp_path.iterdir()) == [path]


def test_row_count_mismatch_names_the_column_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "scores.parquet"
    columns = _columns()
    write_holdout_scores(target, _split(columns), columns["scores"])
    before = target.read_bytes()
    bad = _columns()
    bad["label_source"] = ["manual"] * 2
    with pytest.raises(ValueError, match=r"column 'label_source' has 2 rows, scores have 3"):
        write_holdout_scores(target, _split(bad), bad["scores"])
    assert target.read_bytes() == before
    assert list(tmp_path.iterdir()) == [target]


def test_score_width_must_match_the_heads(tmp_path):
    bad = _columns()
    bad["heads"] = ["FollowBot"]
    with pytest.raises(ValueError, match=r"expected shape \(rows, 1\) for heads \['FollowBot'\]"):
        write_holdout_scores(tmp_path / "s.parquet", _split(bad), bad["scores"])
    assert not (tmp_path / "s.parquet").exists()
