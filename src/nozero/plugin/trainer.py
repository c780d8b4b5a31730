"""What ``pytest --nozero`` tests: a trainer described by its batches and its run function.

Nothing here depends on a framework: ``run`` may use JAX, PyTorch, Keras or plain numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nozero.plugin.batches import (
    Batch,
    CleanBatchMaker,
    FieldRange,
    as_numpy,
    check_batch,
    default_clean_batch,
    float_fields,
    normalise_spec,
    spec_from_example,
)

__all__ = ["FieldRange", "TrainerUnderTest"]

RunFunction = Callable[[list[Batch]], Any]


def _float_field_names(
    setting: str, names: Sequence[str] | str | None, default: tuple[str, ...]
) -> tuple[str, ...]:
    """``names`` as a tuple (``default`` when None), each checked to be a float field."""
    if names is None:
        return default
    chosen = (names,) if isinstance(names, str) else tuple(names)
    for name in chosen:
        if name not in default:
            raise ValueError(
                f"{setting} names {name!r}, which is not one of the float fields {list(default)}"
            )
    return chosen


def _positive_int(setting: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{setting} must be an int, got {value!r}")
    if value < 1:
        raise ValueError(f"{setting} must be >= 1, got {value}")


@dataclass(frozen=True)
class TrainerUnderTest:
    """A trainer as the non-finite contract sees it.

    - ``batch_spec``: ``{field: (shape, numpy dtype)}``; shapes are fixed (or use
      :meth:`from_example`).
    - ``run(batches)``: trains from a fresh initialisation on ``batches`` in order, one
      optimizer step per ``steps_per_update`` batches; must raise the documented error
      (:class:`nozero.NonFiniteError`) at the optimizer step that saw a non-finite value.
      It returns the per-step history (``(loss, grad_norm)`` pairs, a list of metric
      dicts, a dict of lists, Keras' ``History``; all must be finite), or the trained
      model / params / state (all its float arrays must be finite). After a huge input,
      ``overflow`` accepts a normal return only with a history, or when every step went
      through ``nozero.check_finite``: finite parameters alone prove nothing about the
      losses along the way.
    - ``poison_fields``: float fields the checks may poison (default: all float fields).
    - ``check_every``: the declared detection granularity in optimizer steps (1 = exact).
    - ``make_clean_batch(rng)``: a batch of valid, finite values (default: standard-normal
      floats, ints in {0, 1}, random bools).
    - ``vary_fields``: float fields whose clean values ``no_false_alarm`` may zero, rescale
      or give constant columns (default: ``poison_fields``).
    - ``field_ranges``: ``{field: FieldRange(...)}``, the valid values of varied fields
      (largest magnitude, non-zeros per row).
    - ``compile_count()``: optional; how many times the trainer has compiled so far (see
      :func:`nozero.testing.count_traces`). Each check then asserts it compiled at most once.
    - ``steps_per_update``: gradient accumulation, batches per optimizer step. "Step" in
      the documented error, the history and every message then means optimizer step.
    """

    batch_spec: Mapping[str, tuple[Sequence[int], Any]]
    run: RunFunction
    poison_fields: Sequence[str] | None = None
    check_every: int = 1
    make_clean_batch: CleanBatchMaker | None = None
    vary_fields: Sequence[str] | None = None
    compile_count: Callable[[], int] | None = None
    steps_per_update: int = 1
    field_ranges: Mapping[str, FieldRange] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = normalise_spec(self.batch_spec)
        floats = float_fields(spec)
        fields = _float_field_names("poison_fields", self.poison_fields, floats)
        if not fields:
            raise ValueError("TrainerUnderTest needs at least one float field to poison")
        varied = _float_field_names("vary_fields", self.vary_fields, fields)
        if not callable(self.run):
            raise TypeError(f"run must be callable, got {type(self.run).__name__}")
        _positive_int("check_every", self.check_every)
        _positive_int("steps_per_update", self.steps_per_update)
        ranges = dict(self.field_ranges or {})
        _float_field_names("field_ranges", list(ranges), floats)
        for name, field_range in ranges.items():
            if not isinstance(field_range, FieldRange):
                kind = type(field_range).__name__
                raise TypeError(f"field_ranges[{name!r}] must be a FieldRange, got {kind}")
        object.__setattr__(self, "batch_spec", spec)
        object.__setattr__(self, "poison_fields", fields)
        object.__setattr__(self, "vary_fields", varied)
        object.__setattr__(self, "field_ranges", ranges)

    @classmethod
    def from_example(cls, example: Mapping[str, Any], run: RunFunction, **options: Any):
        """A trainer described by one real batch: the spec is its shapes and dtypes.

        Unless given, clean batches are the example's rows shuffled (so ints stay valid
        tokens and masks keep their ones), and ``vary_fields`` leaves out float fields
        holding only 0 and 1 (masks, multi-hot labels), which rescaling would make invalid.
        """
        spec = spec_from_example(example)
        rows = {name: as_numpy(value) for name, value in example.items()}
        options.setdefault("make_clean_batch", _shuffled_rows(rows))
        if "vary_fields" not in options:
            poisonable = options.get("poison_fields") or float_fields(spec)
            options["vary_fields"] = tuple(
                name for name in poisonable if not np.isin(rows[name], (0.0, 1.0)).all()
            )
        return cls(batch_spec=spec, run=run, **options)

    def batches_per_run(self, steps: int) -> int:
        """How many batches ``steps`` optimizer steps take."""
        return steps * self.steps_per_update

    def clean_batch(self, rng: np.random.Generator) -> Batch:
        """One valid batch, checked against ``batch_spec``."""
        if self.make_clean_batch is None:
            return default_clean_batch(self.batch_spec, rng)
        return check_batch(self.batch_spec, self.make_clean_batch(rng), "make_clean_batch")

    def clean_batches(self, seed: int, steps: int) -> list[Batch]:
        """The batches of ``steps`` optimizer steps, a pure function of ``seed``."""
        rng = np.random.default_rng(seed)
        return [self.clean_batch(rng) for _ in range(self.batches_per_run(steps))]


def _shuffled_rows(rows: Mapping[str, np.ndarray]) -> CleanBatchMaker:
    def make_clean_batch(rng: np.random.Generator) -> Batch:
        out = {}
        for name, array in rows.items():
            out[name] = array[rng.permutation(len(array))] if array.ndim else array.copy()
        return out

    return make_clean_batch
