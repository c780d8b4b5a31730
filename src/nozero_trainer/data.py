"""Load parquet shards of cached embeddings into dense, training-ready numpy arrays.

Everything is vectorised with pyarrow compute and numpy: no Python work per row.
Shards are decoded a few thousand rows at a time by a reader thread, and their
embeddings copied once, straight into one preallocated float32 array, so peak memory
stays near the size of what is returned.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from queue import Full, Queue

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nozero_trainer.heads import DEFAULT_HEADS, empty_label_index

log = logging.getLogger("nozero_trainer.data")

COLUMNS = ("user_id", "cls", "labels", "label_source", "label_strength")
STRONG = "strong"
# Rows decoded at a time. Reading a whole 100 MB shard at once costs pyarrow several
# times that in transient buffers; batches keep the loader's peak near its output.
# 2048 rows, 8 ahead loaded 200k x 1024 rows ~8% faster than 4096 rows, 4 ahead (the
# same rows in flight), best of 12 alternating runs.
BATCH_ROWS = 2048
READ_AHEAD = 8  # batches decoded ahead of the copying


@dataclasses.dataclass
class LoadStats:
    """What loading a split kept and dropped, so nothing is dropped silently."""

    shards: list[tuple[str, int]]  # (file name, size in bytes)
    rows_read: int = 0
    non_strong_dropped: int = 0
    non_finite_dropped: int = 0
    unknown_labels: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def rows_kept(self) -> int:
        return self.rows_read - self.non_strong_dropped - self.non_finite_dropped

    def describe(self, where: str) -> str:
        text = (
            f"{where}: kept {self.rows_kept} of {self.rows_read} rows from "
            f"{len(self.shards)} shard(s); dropped {self.non_strong_dropped} non-strong, "
            f"{self.non_finite_dropped} with non-finite cls"
        )
        if self.unknown_labels:
            text += f"; unknown label strings (not in the head registry): {self.unknown_labels}"
        return text


@dataclasses.dataclass
class Split:
    """One split as arrays: row ``i`` of every field describes the same example."""

    user_id: np.ndarray  # int64 [n]
    cls: np.ndarray  # float32 [n, d]
    labels: np.ndarray  # float32 multi-hot [n, H]
    label_lists: pa.Array  # the original list<string> labels
    label_source: pa.Array
    label_strength: pa.Array
    heads: tuple[str, ...]
    stats: LoadStats
    # Read as one process's share: every process's kept rows, and the global label counts.
    row_counts: tuple[int, ...] | None = None
    label_counts: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.user_id.shape[0])

    @property
    def global_rows(self) -> int:
        """Rows of the whole split (every process's share)."""
        return len(self) if self.row_counts is None else sum(self.row_counts)

    def global_label_counts(self) -> np.ndarray:
        """Positives per head over the whole split."""
        return self.labels.sum(axis=0) if self.label_counts is None else self.label_counts


def _is_list_of(dtype: pa.DataType, value_check) -> bool:
    list_kinds = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    return any(kind(dtype) for kind in list_kinds) and value_check(dtype.value_type)


def _is_string(dtype: pa.DataType) -> bool:
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype)


_EXPECTED = {
    "user_id": ("int64", pa.types.is_int64),
    "cls": ("list<float32>", lambda t: _is_list_of(t, pa.types.is_float32)),
    "labels": ("list<string>", lambda t: _is_list_of(t, _is_string)),
    "label_source": ("string", _is_string),
    "label_strength": ("string", _is_string),
}


def _check_schema(path: Path, schema: pa.Schema) -> None:
    missing = [c for c in _EXPECTED if schema.get_field_index(c) < 0]
    if missing:
        raise ValueError(f"{path}: missing column {', '.join(repr(c) for c in missing)}")
    for column, (expected, accepts) in _EXPECTED.items():
        dtype = schema.field(column).type
        if not accepts(dtype):
            raise ValueError(f"{path}: column {column!r} has type {dtype}, expected {expected}")


def _cls_width(path: Path, cls: pa.Array, first_row: int, width: int | None) -> int:
    """Check every ``cls`` list has ``width`` values (the first row's, if not yet known)."""
    if cls.null_count:
        row = first_row + int(pc.index(pc.is_null(cls), True).as_py())
        raise ValueError(f"{path}: column 'cls' is null at row {row}")
    lengths = pc.list_value_length(cls)
    if width is None:
        width = lengths[0].as_py()
        if width == 0:
            raise ValueError(f"{path}: column 'cls' holds empty embeddings (row {first_row})")
    low, high = pc.min_max(lengths).values()
    if low.as_py() != width or high.as_py() != width:
        index = int(pc.index(pc.not_equal(lengths, width), True).as_py())
        raise ValueError(
            f"{path}: column 'cls' is ragged: row {first_row + index} has width "
            f"{lengths[index].as_py()}, expected {width} (the first row's)"
        )
    return width


# Columns every row must fill: a null there is a broken shard, refused by file and row.
NOT_NULL = ("user_id",)
# ... and columns every kept (strong, finite) row must fill.
NOT_NULL_WHEN_KEPT = ("labels",)


def _refuse_nulls(path: Path, batch: pa.RecordBatch, first_row: int, keep: np.ndarray) -> None:
    """Name the file, column and row of the first null where a value is required."""
    for column, among in [(c, None) for c in NOT_NULL] + [(c, keep) for c in NOT_NULL_WHEN_KEPT]:
        array = batch[column]
        if not array.null_count:
            continue
        null = pc.is_null(array).to_numpy(zero_copy_only=False)
        if among is not None:
            null &= among
        if null.any():
            row = first_row + int(np.flatnonzero(null)[0])
            raise ValueError(f"{path}: column {column!r} is null at row {row}")


def _multi_hot(labels: pa.Array, heads: tuple[str, ...], unknown: dict[str, int]) -> np.ndarray:
    """Multi-hot ``[n, H]`` float32; empty lists map to the empty-label head."""
    out = np.zeros((len(labels), len(heads)), dtype=np.float32)
    if len(labels) == 0:
        return out
    if labels.null_count:
        row = int(pc.index(pc.is_null(labels), True).as_py())
        raise ValueError(f"column 'labels' is null at row {row}")
    values = pc.list_flatten(labels)
    rows = pc.list_parent_indices(labels).to_numpy()
    head_index = pc.index_in(values, value_set=pa.array(heads, type=values.type))
    known = pc.is_valid(head_index).to_numpy(zero_copy_only=False)
    out[rows[known], head_index.drop_null().to_numpy()] = 1.0
    if not known.all():
        counts = pc.value_counts(pc.filter(values, pc.invert(pc.is_valid(head_index))))
        for entry in counts.to_pylist():  # one entry per distinct unknown label, not per row
            unknown[entry["values"]] = unknown.get(entry["values"], 0) + entry["counts"]
    empty_head = empty_label_index(heads)
    if empty_head is not None:
        empty = pc.list_value_length(labels).to_numpy(zero_copy_only=False) == 0
        out[empty, empty_head] = 1.0
    return out


def _shard_paths(split_dir: Path) -> list[Path]:
    if not split_dir.is_dir():
        raise ValueError(f"{split_dir}: split directory does not exist")
    paths = sorted(split_dir.glob("*.parquet"))
    if not paths:
        raise ValueError(f"{split_dir}: no *.parquet shards")
    return paths


def _batches(path: Path) -> Iterator[pa.RecordBatch]:
    """The shard's rows a few thousand at a time, so the reader's own buffers stay small."""
    try:
        yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=list(COLUMNS))
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path}: not a readable parquet file ({err})") from err


def _read_ahead(paths: list[Path]) -> Iterator[tuple[Path, pa.RecordBatch]]:
    """Yield ``(path, batch)`` while a thread already decodes the next batches.

    pyarrow decodes without holding the GIL, so reading overlaps the numpy copying of
    the previous batch; the queue bounds how much is read ahead.
    """
    queue: Queue = Queue(maxsize=READ_AHEAD)
    stop = threading.Event()

    def offer(item: object) -> bool:
        """Put ``item`` unless the consumer has gone away (then never block on a full queue)."""
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.05)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        try:
            for path in paths:
                for batch in _batches(path):
                    if not offer((path, batch)):
                        return
            offer(None)
        except BaseException as err:  # handed to the consumer, raised there
            offer(err)

    reader = threading.Thread(target=produce, name="nozero-shard-reader", daemon=True)
    reader.start()
    try:
        while (item := queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join()


@dataclasses.dataclass(frozen=True)
class Share:
    """Process ``process`` of ``processes`` reads one contiguous block of a split's shards.

    Blocks in process order are the shards in name order, so the global rows (every
    process's rows in process order) are the rows one process reading everything sees.
    """

    process: int
    processes: int

    def of(self, paths: list[Path]) -> list[Path]:
        bounds = np.linspace(0, len(paths), self.processes + 1).round().astype(int)
        return paths[bounds[self.process] : bounds[self.process + 1]]


def _read_shards(
    split_dir: Path, paths: list[Path], heads: tuple[str, ...], allow_empty: bool = False
) -> Split:
    """Read ``paths`` into one split; keep strong-label rows with finite embeddings."""
    capacity = 0  # rows in all shards, from the footers: the embeddings are allocated once
    for path in paths:  # every shard's schema is checked before any data is read
        try:
            metadata = pq.read_metadata(path)
        except (pa.ArrowInvalid, OSError) as err:
            raise ValueError(f"{path}: not a readable parquet file ({err})") from err
        _check_schema(path, metadata.schema.to_arrow_schema())
        capacity += metadata.num_rows
    stats = LoadStats(shards=[(p.name, p.stat().st_size) for p in paths])

    cls_out: np.ndarray | None = None
    width: int | None = None
    kept = 0
    user_ids, label_arrays, sources, strengths, multi_hots = [], [], [], [], []
    first_rows = dict.fromkeys(paths, 0)
    for path, batch in _read_ahead(paths):
        rows = batch.num_rows
        first_row = first_rows[path]
        if rows == 0:
            continue
        stats.rows_read += rows
        strong = pc.fill_null(pc.equal(batch["label_strength"], STRONG), False)
        strong = strong.to_numpy(zero_copy_only=False)
        stats.non_strong_dropped += int((~strong).sum())
        width = _cls_width(path, batch["cls"], first_row, width)
        if cls_out is None:
            cls_out = np.empty((capacity, width), dtype=np.float32)
        # Zero-copy view of the batch's embeddings as one [rows, width] matrix.
        values = pc.list_flatten(batch["cls"])
        if values.null_count:  # a null inside an embedding is missing: drop the row
            values = pc.fill_null(values, np.float32("nan"))
        matrix = values.to_numpy().reshape(rows, width)
        finite = np.isfinite(matrix).all(axis=1)
        stats.non_finite_dropped += int((strong & ~finite).sum())
        keep = strong & finite
        _refuse_nulls(path, batch, first_row, keep)
        n_keep = int(keep.sum())
        np.compress(keep, matrix, axis=0, out=cls_out[kept : kept + n_keep])
        kept += n_keep
        keep_arrow = pa.array(keep)
        user_ids.append(pc.filter(batch["user_id"], keep_arrow).to_numpy())
        labels = pc.filter(batch["labels"], keep_arrow)
        try:
            multi_hots.append(_multi_hot(labels, heads, stats.unknown_labels))
        except ValueError as err:
            raise ValueError(f"{path}: {err} (of the batch from row {first_row})") from err
        label_arrays.append(labels)
        sources.append(pc.filter(batch["label_source"], keep_arrow))
        strengths.append(pc.filter(batch["label_strength"], keep_arrow))
        first_rows[path] += rows

    if cls_out is None:
        if not allow_empty:
            raise ValueError(f"{split_dir}: the shards hold no rows")
        return _empty_split(heads, stats)
    # Shrink in place to the rows kept; realloc avoids a second full-size copy.
    cls_out.resize((kept, cls_out.shape[1]), refcheck=False)
    return Split(
        user_id=np.concatenate(user_ids).astype(np.int64, copy=False),
        cls=cls_out,
        labels=np.concatenate(multi_hots),
        label_lists=pa.concat_arrays(label_arrays),
        label_source=pa.concat_arrays(sources),
        label_strength=pa.concat_arrays(strengths),
        heads=tuple(heads),
        stats=stats,
    )


def _empty_split(heads: tuple[str, ...], stats: LoadStats) -> Split:
    """No rows kept (its width is set once the other processes say theirs)."""
    no_strings = pa.array([], pa.string())
    return Split(
        user_id=np.zeros(0, np.int64),
        cls=np.zeros((0, 0), np.float32),
        labels=np.zeros((0, len(heads)), np.float32),
        label_lists=pa.array([], pa.list_(pa.string())),
        label_source=no_strings,
        label_strength=no_strings,
        heads=tuple(heads),
        stats=stats,
    )


def _log_stats(split_dir: Path, stats: LoadStats) -> None:
    flawed = stats.non_finite_dropped or stats.unknown_labels
    log.log(logging.WARNING if flawed else logging.INFO, stats.describe(str(split_dir)))


def load_split(
    split_dir: str | Path, heads: tuple[str, ...] = DEFAULT_HEADS, share: Share | None = None
) -> Split:
    """Read one split's shards (with a ``share``: only that block of them).

    With a ``share`` every process reads its block, then all agree on the split's
    totals: every process ends with the same ``stats`` (shards, rows read and dropped,
    unknown labels), ``row_counts`` and ``label_counts``; a shard one process cannot
    read stops every process with that error.
    """
    split_dir = Path(split_dir)
    if share is None:
        split = _read_shards(split_dir, _shard_paths(split_dir), heads)
        _log_stats(split_dir, split.stats)
        return split
    from nozero_trainer import distributed

    split, error, paths = None, None, []
    try:
        paths = _shard_paths(split_dir)
        if len(paths) < share.processes:
            raise ValueError(
                f"{split_dir}: {len(paths)} shard(s) for {share.processes} processes; each "
                "process reads at least one shard"
            )
        split = _read_shards(split_dir, share.of(paths), heads, allow_empty=True)
    except ValueError as err:
        error = err
    distributed.raise_together(f"load/{split_dir.name}", error)
    _agree(split_dir, split, paths, distributed.exchange(f"stats/{split_dir.name}", _totals(split)))
    _log_stats(split_dir, split.stats)
    return split


def _totals(split: Split) -> dict:
    stats = split.stats
    return {
        "rows_read": stats.rows_read,
        "non_strong": stats.non_strong_dropped,
        "non_finite": stats.non_finite_dropped,
        "unknown": stats.unknown_labels,
        "kept": len(split),
        "width": int(split.cls.shape[1]) if len(split) else None,
        "label_counts": split.labels.sum(axis=0).tolist(),
    }


def _agree(split_dir: Path, split: Split, paths: list[Path], every: list[dict]) -> None:
    """Give ``split`` the totals of every process's share (the same on every process)."""
    widths = {t["width"] for t in every} - {None}
    if not widths:
        raise ValueError(f"{split_dir}: the shards hold no rows")
    if len(widths) > 1:
        raise ValueError(f"{split_dir}: column 'cls' has widths {sorted(widths)} across shards")
    if not len(split):
        split.cls = np.zeros((0, widths.pop()), np.float32)
    unknown: dict[str, int] = {}
    for totals in every:
        for label, count in totals["unknown"].items():
            unknown[label] = unknown.get(label, 0) + count
    split.stats = LoadStats(
        shards=[(p.name, p.stat().st_size) for p in paths],
        rows_read=sum(t["rows_read"] for t in every),
        non_strong_dropped=sum(t["non_strong"] for t in every),
        non_finite_dropped=sum(t["non_finite"] for t in every),
        unknown_labels=dict(sorted(unknown.items())),
    )
    split.row_counts = tuple(t["kept"] for t in every)
    split.label_counts = np.sum([t["label_counts"] for t in every], axis=0)


def _refuse_empty(split_dir: Path, split: Split, purpose: str) -> None:
    """A split that kept no row is refused before training, with what was dropped and why."""
    if split.global_rows == 0:
        raise ValueError(f"{split.stats.describe(str(split_dir))}: no rows left to {purpose}")


def load_dataset(
    data_dir: str | Path, heads: tuple[str, ...] = DEFAULT_HEADS, share: Share | None = None
) -> tuple[Split, Split]:
    """Load ``train/`` (with a ``share``: this process's block) and ``holdout/``.

    Refuses users that appear in both; with a ``share`` every process refuses together,
    with the overlap of the whole training split.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise ValueError(f"{data_dir}: data directory does not exist")
    train = load_split(data_dir / "train", heads, share)
    _refuse_empty(data_dir / "train", train, "train on")
    holdout = load_split(data_dir / "holdout", heads)
    _refuse_empty(data_dir / "holdout", holdout, "evaluate on")
    overlap = np.intersect1d(train.user_id, holdout.user_id).tolist()
    if share is not None:
        from nozero_trainer import distributed

        every = distributed.exchange("overlap", {"count": len(overlap), "some": overlap[:5]})
        overlap_count = sum(o["count"] for o in every)
        overlap = [u for o in every for u in o["some"]]
    else:
        overlap_count = len(overlap)
    if overlap_count:
        shown = ", ".join(str(u) for u in overlap[:5])
        raise ValueError(
            f"{data_dir}: {overlap_count} user_id(s) appear in both train and holdout "
            f"(e.g. {shown}); a holdout must hold unseen users"
        )
    if train.cls.shape[1] != holdout.cls.shape[1]:
        raise ValueError(
            f"{data_dir}: train cls width {train.cls.shape[1]} != holdout width "
            f"{holdout.cls.shape[1]}"
        )
    return train, holdout
