"""The holdout scores file: one row per holdout user, the labels beside every head's score.

People use it to pick thresholds and read errors without rerunning the model, so it keeps
the source columns as they were read (``user_id``, ``labels``, ``label_source``,
``label_strength``) and adds one ``score_<head>`` column (a probability) per head.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from nozero._atomic import atomic_output
from nozero_trainer.data import Split

SOURCE_COLUMNS: dict[str, pa.DataType] = {
    "user_id": pa.int64(),
    "labels": pa.list_(pa.string()),
    "label_source": pa.string(),
    "label_strength": pa.string(),
}


def score_column(head: str) -> str:
    return f"score_{head}"


def scores_table(
    user_id: Any,
    labels: Any,
    label_source: Any,
    label_strength: Any,
    scores: np.ndarray,
    heads: Sequence[str],
) -> pa.Table:
    """Build the table, refusing columns whose lengths or types do not fit together."""
    scores = np.asarray(scores)
    if scores.ndim != 2 or scores.shape[1] != len(heads):
        raise ValueError(
            f"scores: expected shape (rows, {len(heads)}) for heads {list(heads)}, "
            f"got {scores.shape}"
        )
    columns: dict[str, pa.Array] = {}
    for name, values in zip(
        SOURCE_COLUMNS, (user_id, labels, label_source, label_strength), strict=True
    ):
        try:
            if isinstance(values, pa.Array | pa.ChunkedArray):  # e.g. large_string from parquet
                columns[name] = values.cast(SOURCE_COLUMNS[name])
            else:
                columns[name] = pa.array(values, type=SOURCE_COLUMNS[name])
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
            raise ValueError(f"holdout scores column {name!r}: {err}") from err
        if len(columns[name]) != scores.shape[0]:
            raise ValueError(
                f"holdout scores column {name!r} has {len(columns[name])} rows, "
                f"scores have {scores.shape[0]}"
            )
    for index, head in enumerate(heads):
        columns[score_column(head)] = pa.array(scores[:, index].astype(np.float32))
    return pa.table(columns)


def write_holdout_scores(path: str | os.PathLike[str], split: Split, scores: np.ndarray) -> Path:
    """Write ``split``'s rows beside ``scores`` atomically: the old file or the whole new one."""
    table = scores_table(
        split.user_id,
        split.label_lists,
        split.label_source,
        split.label_strength,
        scores,
        split.heads,
    )
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)
