"""Data parallelism on a ``jax.sharding.Mesh`` with one ``data`` axis over every device.

The global batch is split over ``data``; parameters and optimizer state are replicated.
Under ``jit`` GSPMD then reduces the gradients over the axis, so each step's loss and
gradient norm are global values, the same on every device and process.

Training rows live sharded by row: each process holds only the rows it read (its share
of the shards), padded to one capacity per process so every device holds as many rows.
A batch is gathered on the devices from that row-sharded array by global row index, so
batch order stays a pure function of (seed, step), whatever the device count.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA = "data"


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where arrays live: the mesh and its two shardings (hashable: keys compile caches)."""

    mesh: Mesh

    @property
    def devices(self) -> int:
        return int(self.mesh.devices.size)

    @property
    def batch(self) -> NamedSharding:
        """Leading (row) axis split over ``data``."""
        return NamedSharding(self.mesh, PartitionSpec(DATA))

    @property
    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec())

    def describe(self) -> str:
        processes = len({d.process_index for d in self.mesh.devices.flat})
        return (
            f"data parallel over {self.devices} device(s) in {processes} process(es) "
            f"({jax.default_backend()})"
        )


def data_placement(devices: Sequence[jax.Device] | None = None) -> Placement:
    """A ``data`` mesh over ``devices`` (default: every device of every process)."""
    devices = list(jax.devices() if devices is None else devices)
    # Grouped by process, so each process's devices hold one contiguous block of rows.
    devices.sort(key=lambda d: (d.process_index, d.id))
    return Placement(Mesh(np.array(devices), (DATA,)))


def check_global_batch(batch_size: int, placement: Placement) -> None:
    """``--batch-size`` is the global batch: it must split evenly over the devices."""
    if batch_size % placement.devices:
        raise ValueError(
            f"batch_size ({batch_size}) is the global batch and must divide by the device "
            f"count ({placement.devices}): e.g. {_nearest_multiple(batch_size, placement.devices)}"
        )


def _nearest_multiple(value: int, factor: int) -> int:
    return max(factor, round(value / factor) * factor)


def replicate(tree: Any, placement: Placement) -> Any:
    """Every leaf of ``tree`` (the same value on every process) on every device."""
    sharding = placement.replicated

    def put(leaf: Any) -> jax.Array:
        if isinstance(leaf, jax.Array) and leaf.sharding == sharding:
            return leaf
        host = np.asarray(leaf)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree)


def global_batch(local: np.ndarray, placement: Placement, global_rows: int) -> jax.Array:
    """The global ``[global_rows, ...]`` batch from this process's rows of it."""
    return jax.make_array_from_process_local_data(
        placement.batch, local, (global_rows, *local.shape[1:])
    )


def fetch(tree: Any) -> Any:
    """Host copies of replicated (or single-device) arrays; the same on every process."""
    return jax.device_get(tree)


def split_batch(batch: Any, placement: Placement) -> Any:
    """A batch every process holds whole, split over ``data`` (each process gives its part)."""

    def put(leaf: Any) -> jax.Array:
        host = np.asarray(leaf)
        return jax.make_array_from_callback(host.shape, placement.batch, lambda i: host[i])

    return jax.tree.map(put, batch)


def gather_to_host(tree: Any) -> Any:
    """Whole host copies of (possibly split) global arrays, on every process."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """Global row ``g`` of the training set lives at padded row ``padded(g)``.

    Process ``p`` holds global rows ``offsets[p] .. offsets[p] + counts[p] - 1`` at padded
    rows ``p * capacity ..``; the rest of its block is padding no batch ever reads.
    """

    counts: tuple[int, ...]
    capacity: int  # padded rows per process, a multiple of its device count

    @classmethod
    def plan(cls, counts: Sequence[int], devices_per_process: int) -> RowLayout:
        most = max(max(counts), 1)
        capacity = -(-most // devices_per_process) * devices_per_process
        return cls(tuple(int(c) for c in counts), capacity)

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)

    def padded(self, rows: np.ndarray) -> np.ndarray:
        """Padded positions of global row indices ``rows`` (any shape)."""
        rows = np.asarray(rows)
        offsets = self.offsets
        process = np.searchsorted(offsets, rows, side="right") - 1
        # A process with no rows shares its offset with the next one; searchsorted picks
        # the last, which is the one holding the row.
        return (process * self.capacity + rows - offsets[process]).astype(np.int32)

    def owner(self, rows: np.ndarray) -> np.ndarray:
        """The process holding each global row."""
        return np.searchsorted(self.offsets, np.asarray(rows), side="right") - 1


def shard_rows(local: np.ndarray, layout: RowLayout, placement: Placement) -> jax.Array:
    """This process's rows, padded to ``layout.capacity``, as one global row-sharded array."""
    block = np.zeros((layout.capacity, *local.shape[1:]), dtype=local.dtype)
    block[: len(local)] = local
    global_shape = (layout.capacity * len(layout.counts), *local.shape[1:])
    return jax.make_array_from_process_local_data(placement.batch, block, global_shape)


def batch_holders(
    poisoned: np.ndarray, rows: np.ndarray | None, placement: Placement
) -> dict[str, Any]:
    """Which process and device held each position of a global batch, and each poisoned one.

    ``poisoned`` flags batch positions; ``rows`` are their global row indices, if known.
    """
    per_device = len(poisoned) // placement.devices
    where = [(int(d.process_index), int(d.id)) for d in placement.mesh.devices.flat]
    where = [w for w in where for _ in range(per_device)]
    return {
        "placement": placement.describe(),
        "positions": [{"process": p, "device": d} for p, d in where],
        "poisoned": [
            {
                "position": int(i),
                "row": None if rows is None else int(rows[i]),
                "process": where[i][0],
                "device": where[i][1],
            }
            for i in np.flatnonzero(poisoned)
        ],
    }


@functools.lru_cache(maxsize=8)
def _gatherer(out: NamedSharding) -> Any:
    """A jitted gather of rows from row-sharded data into the ``out`` sharding."""
    return jax.jit(
        lambda data, rows: data.at[rows].get(mode="promise_in_bounds"), out_shardings=out
    )


class ShardedRows:
    """Training rows held row-sharded over the mesh, each process holding its share.

    ``cls`` and ``labels`` are this process's rows; the global training set is every
    process's rows in process order (the order one process reading every shard sees).
    """

    def __init__(
        self, cls: np.ndarray, labels: np.ndarray, placement: Placement, counts: Sequence[int]
    ) -> None:
        local_devices = placement.devices // len(counts)
        self.placement = placement
        self.layout = RowLayout.plan(counts, local_devices)
        self.in_dim, self.n_heads = int(cls.shape[1]), int(labels.shape[1])
        self.data_x = shard_rows(np.asarray(cls, np.float32), self.layout, placement)
        self.data_y = shard_rows(np.asarray(labels, np.float32), self.layout, placement)

    @property
    def n_rows(self) -> int:
        return self.layout.rows

    def indices(self, rows: np.ndarray) -> jax.Array:
        """Padded positions of global rows ``rows``, replicated (one copy per device)."""
        return replicate(self.layout.padded(rows), self.placement)

    def host_batch(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The whole batch of global rows ``rows`` on the host, the same on every process."""
        gather, index = _gatherer(self.placement.replicated), self.indices(rows)
        return fetch((gather(self.data_x, index), gather(self.data_y, index)))
