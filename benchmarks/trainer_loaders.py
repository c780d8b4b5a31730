"""Loaders compared by the trainer benchmark, each run in its own process for peak memory.

``python benchmarks/trainer_loaders.py KIND SPLIT_DIR [MAX_ROWS]`` prints one JSON line:
seconds, rows, the peak resident memory added by loading, and the bytes returned.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from nozero_trainer.data import COLUMNS, load_split
from nozero_trainer.heads import DEFAULT_HEADS


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc (``VmRSS`` now, ``VmHWM`` its peak).

    VmHWM belongs to this process image alone; ``ru_maxrss`` would also count the
    parent's memory at fork time.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def load_ours(split_dir: Path, max_rows: int | None) -> tuple[int, int]:
    split = load_split(split_dir)
    returned = split.cls.nbytes + split.labels.nbytes + split.user_id.nbytes
    return split.stats.rows_read, returned


def load_pyarrow_floor(split_dir: Path, max_rows: int | None) -> tuple[int, int]:
    """Reading the same columns of the same shards, and nothing else: the floor."""
    rows = 0
    for path in sorted(split_dir.glob("*.parquet")):
        rows += pq.read_table(path, columns=list(COLUMNS)).num_rows
    return rows, 0


def load_row_by_row(split_dir: Path, max_rows: int | None) -> tuple[int, int]:
    """The common way: ``to_pylist()`` and a Python loop over rows."""
    user_ids, embeddings, hot_rows, rows = [], [], [], 0
    legit = DEFAULT_HEADS.index("LegitimateUser")
    for path in sorted(split_dir.glob("*.parquet")):
        table = pq.read_table(path, columns=list(COLUMNS))
        if max_rows is not None:
            table = table.slice(0, max_rows - rows)
        for row in table.to_pylist():
            rows += 1
            if row["label_strength"] != "strong":
                continue
            if not all(math.isfinite(v) for v in row["cls"]):
                continue
            hot = [0.0] * len(DEFAULT_HEADS)
            for label in row["labels"]:
                if label in DEFAULT_HEADS:
                    hot[DEFAULT_HEADS.index(label)] = 1.0
            if not row["labels"]:
                hot[legit] = 1.0
            user_ids.append(row["user_id"])
            embeddings.append(row["cls"])
            hot_rows.append(hot)
        if max_rows is not None and rows >= max_rows:
            break
    cls = np.array(embeddings, dtype=np.float32)
    labels = np.array(hot_rows, dtype=np.float32)
    ids = np.array(user_ids, dtype=np.int64)
    return rows, cls.nbytes + labels.nbytes + ids.nbytes


LOADERS = {"ours": load_ours, "pyarrow": load_pyarrow_floor, "row_by_row": load_row_by_row}


def main() -> None:
    kind, split_dir = sys.argv[1], Path(sys.argv[2])
    max_rows = int(sys.argv[3]) if len(sys.argv) > 3 else None
    before = _status_bytes("VmRSS")
    started = time.perf_counter()
    rows, returned = LOADERS[kind](split_dir, max_rows)
    seconds = time.perf_counter() - started
    peak = _status_bytes("VmHWM")
    print(
        json.dumps(
            {
                "kind": kind,
                "seconds": seconds,
                "rows": rows,
                "peak_added_bytes": peak - before,
                "returned_bytes": returned,
            }
        )
    )


if __name__ == "__main__":
    main()
