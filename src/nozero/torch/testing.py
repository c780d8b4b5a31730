"""The plugin's batches (a list of dicts of numpy arrays) as torch frameworks take data.

``pytest --nozero`` calls ``run(batches)`` with one batch per step, in order. A plain loop
reads them directly (``torch.from_numpy``); Lightning and the Hugging Face Trainer want a
data loader or a dataset, and by default shuffle and re-batch what they are given, which
would move the poisoned batch to another step. These helpers hand the batches over so
that step k still trains on batch k.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

__all__ = ["RowDataset", "batch_loader", "row_dataset"]

Batch = Mapping[str, np.ndarray]


def batch_loader(batches: Sequence[Batch]) -> DataLoader:
    """A ``DataLoader`` yielding each batch as a dict of tensors, in order, unshuffled.

    For Lightning: ``trainer.fit(module, train_dataloaders=batch_loader(batches))`` with
    ``max_steps=len(batches)``. Each item already is a whole batch, so automatic batching
    is off (``batch_size=None``) and the loader only converts numpy arrays to tensors.
    """
    return DataLoader(list(batches), batch_size=None, shuffle=False)


class RowDataset(IterableDataset):
    """The rows of a list of batches, in order; ``rows_per_batch`` rows make one batch.

    Iterable, not map-style: a Trainer gives a map-style dataset a random sampler, which
    would move the poisoned rows to another step.
    """

    def __init__(self, batches: Sequence[Batch]) -> None:
        if not batches:
            raise ValueError("row_dataset needs at least one batch")
        sizes = {len(np.asarray(array)) for batch in batches for array in batch.values()}
        if len(sizes) != 1:
            raise ValueError(
                "row_dataset needs every field of every batch to have the same number of "
                f"rows, got {sorted(sizes)}"
            )
        self.rows_per_batch = sizes.pop()
        self._batches = [
            {name: torch.from_numpy(np.asarray(array)) for name, array in batch.items()}
            for batch in batches
        ]

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for batch in self._batches:
            for row in range(self.rows_per_batch):
                yield {name: values[row] for name, values in batch.items()}


def row_dataset(batches: Sequence[Batch]) -> RowDataset:
    """The batches' rows in order, as an iterable dataset of dicts of tensors.

    For the Hugging Face Trainer: with ``per_device_train_batch_size=ds.rows_per_batch``
    its loader rebuilds the same batches, one per step (an iterable dataset gets no
    sampler, so nothing is shuffled). Raises ``ValueError`` if there is no batch or if
    fields or batches differ in their number of rows.
    """
    return RowDataset(batches)
