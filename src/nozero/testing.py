"""What ``pytest --nozero`` tests: a trainer described by its batches and its run function.

Register one with a ``nozero_trainer`` fixture (in a conftest) returning a
:class:`TrainerUnderTest`, or with the ini option ``nozero_trainer = pkg.mod:factory``.
Nothing here depends on a framework: ``run`` may use JAX, PyTorch or plain numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nozero._batches import (
    Batch,
    CleanBatchMaker,
    check_batch,
    default_clean_batch,
    float_fields,
    normalise_spec,
)

__all__ = ["TrainerUnderTest"]


def _float_field_names(
    setting: str, names: Sequence[str] | str | None, default: tuple[str, ...]
) -> tuple[str, ...]:
    """``names`` as a tuple (``default`` when None), each checked to be a float field."""
    if names is None:
        return default
    chosen = (names,) if isinstance(names, str) else tuple(names)
    for field in chosen:
        if field not in default:
            raise ValueError(
                f"{setting} names {field!r}, which is not one of the float fields {list(default)}"
            )
    return chosen


RunFunction = Callable[[list[Batch]], Iterable[tuple[Any, Any]] | None]


@dataclass(frozen=True)
class TrainerUnderTest:
    """A trainer as the non-finite contract sees it.

    - ``batch_spec``: ``{field: (shape, numpy dtype)}``; shapes are fixed.
    - ``run(batches)``: one optimizer step per batch, in order, from a fresh
      initialisation; must raise the documented error (:class:`nozero.NonFiniteError`).
      It may return the per-step ``(loss, grad_norm)`` it saw: then all must be finite.
    - ``poison_fields``: float fields the contract may poison and vary (default: all
      float fields).
    - ``check_every``: the declared detection granularity (1 = the exact step).
    - ``make_clean_batch(rng)``: a batch of valid, finite values (default: standard-normal
      floats, ints in {0, 1}, random bools).
    - ``vary_fields``: float fields whose clean values the no-false-alarm contract may
      zero, rescale (tiny and large magnitudes) or give constant columns (default:
      ``poison_fields``). Leave out fields with a fixed set of valid values, such as
      multi-hot labels.
    - ``compile_count()``: optional; how many times the trainer has compiled so far. When
      given, each contract asserts it compiled at most once (shapes never change).
    """

    batch_spec: Mapping[str, tuple[Sequence[int], Any]]
    run: RunFunction
    poison_fields: Sequence[str] | None = None
    check_every: int = 1
    make_clean_batch: CleanBatchMaker | None = None
    vary_fields: Sequence[str] | None = None
    compile_count: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        spec = normalise_spec(self.batch_spec)
        floats = float_fields(spec)
        fields = _float_field_names("poison_fields", self.poison_fields, floats)
        if not fields:
            raise ValueError("TrainerUnderTest needs at least one float field to poison")
        varied = _float_field_names("vary_fields", self.vary_fields, fields)
        if not callable(self.run):
            raise TypeError(f"run must be callable, got {type(self.run).__name__}")
        if isinstance(self.check_every, bool) or not isinstance(self.check_every, int):
            raise TypeError(f"check_every must be an int, got {self.check_every!r}")
        if self.check_every < 1:
            raise ValueError(f"check_every must be >= 1, got {self.check_every}")
        object.__setattr__(self, "batch_spec", spec)
        object.__setattr__(self, "poison_fields", fields)
        object.__setattr__(self, "vary_fields", varied)

    def clean_batch(self, rng: np.random.Generator) -> Batch:
        """One valid batch, checked against ``batch_spec``."""
        if self.make_clean_batch is None:
            return default_clean_batch(self.batch_spec, rng)
        return check_batch(self.batch_spec, self.make_clean_batch(rng), "make_clean_batch")

    def clean_batches(self, seed: int, steps: int) -> list[Batch]:
        """``steps`` valid batches, a pure function of ``seed`` (so failures reproduce)."""
        rng = np.random.default_rng(seed)
        return [self.clean_batch(rng) for _ in range(steps)]
