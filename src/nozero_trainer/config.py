"""Every training setting in one frozen, hashable record, and its validation.

The config is hashable so compiled training functions can be cached on it, and it
round-trips through JSON so a run directory records exactly what produced it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nozero_trainer.heads import DEFAULT_HEADS


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (the CLI flags map onto these one to one)."""

    steps: int = 2000
    batch_size: int = 256
    peak_lr: float = 1e-3
    warmup_steps: int = 100
    end_lr_ratio: float = 0.05
    focal_gamma: float = 2.0
    focal_alpha: float | None = None
    label_smoothing: float = 0.0
    reverse_ce_weight: float = 0.1
    hidden_dims: tuple[int, ...] = (512, 256)
    eval_every: int = 500
    seed: int = 0
    sync_every: int = 100
    chunk_steps: int = 50
    clip_norm: float = 1.0
    weight_decay: float = 1e-4
    class_weighting: bool = True
    mask_zero_positive_heads: bool = False
    heads: tuple[str, ...] = DEFAULT_HEADS

    def __post_init__(self) -> None:
        # Lists from JSON or callers become tuples so the config stays hashable.
        object.__setattr__(self, "hidden_dims", tuple(int(d) for d in self.hidden_dims))
        object.__setattr__(self, "heads", tuple(str(h) for h in self.heads))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        out = dataclasses.asdict(self)
        out["hidden_dims"] = list(self.hidden_dims)
        out["heads"] = list(self.heads)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error, not silently ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig setting(s): {', '.join(unknown)}")
        return cls(**dict(data))

    def compile_key(self) -> TrainConfig:
        """The config with the settings that never change compiled code reset.

        Seed, evaluation and sync cadence only steer the host loop, so runs that differ
        only in them share one compiled step.
        """
        return dataclasses.replace(self, seed=0, eval_every=0, sync_every=1)


def _positive_int(name: str, value: int) -> None:
    if not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def validate(
    config: TrainConfig, n_train: int, label_counts: Sequence[float] | np.ndarray
) -> tuple[str, ...]:
    """Refuse bad settings before any step runs; return the heads masked out (if any).

    Raises ``ValueError`` naming the setting or head. A head with zero training
    positives has an infinite class-balanced weight, so it is refused while class
    weighting is on, unless ``mask_zero_positive_heads`` asks to train without it.
    """
    _positive_int("steps", config.steps)
    _positive_int("batch_size", config.batch_size)
    _positive_int("sync_every", config.sync_every)
    _positive_int("chunk_steps", config.chunk_steps)
    if config.eval_every < 0:
        raise ValueError(f"eval_every must be >= 0 (0 = only at the end), got {config.eval_every}")
    if not (0 < config.peak_lr <= float(np.finfo(np.float32).max)):  # training is float32
        raise ValueError(
            f"peak_lr must be positive and finite in float32, got {config.peak_lr!r}"
        )
    if not (0 <= config.warmup_steps < config.steps):
        raise ValueError(
            f"warmup_steps ({config.warmup_steps}) must be >= 0 and shorter than the run "
            f"(steps={config.steps})"
        )
    if not (math.isfinite(config.end_lr_ratio) and 0 <= config.end_lr_ratio <= 1):
        raise ValueError(f"end_lr_ratio must be in [0, 1], got {config.end_lr_ratio!r}")
    if not (math.isfinite(config.focal_gamma) and config.focal_gamma >= 0):
        raise ValueError(f"focal_gamma must be finite and >= 0, got {config.focal_gamma!r}")
    alpha = config.focal_alpha
    if alpha is not None and not (math.isfinite(alpha) and 0 <= alpha <= 1):
        raise ValueError(f"focal_alpha must be in [0, 1] (or unset), got {alpha!r}")
    if not (math.isfinite(config.label_smoothing) and 0 <= config.label_smoothing < 1):
        raise ValueError(
            f"label_smoothing must be in [0, 1), got {config.label_smoothing!r}"
        )
    if not (math.isfinite(config.reverse_ce_weight) and config.reverse_ce_weight >= 0):
        raise ValueError(
            f"reverse_ce_weight must be finite and >= 0, got {config.reverse_ce_weight!r}"
        )
    if not (math.isfinite(config.clip_norm) and config.clip_norm > 0):
        raise ValueError(f"clip_norm must be positive and finite, got {config.clip_norm!r}")
    if not (math.isfinite(config.weight_decay) and config.weight_decay >= 0):
        raise ValueError(f"weight_decay must be finite and >= 0, got {config.weight_decay!r}")
    if any(d <= 0 for d in config.hidden_dims):
        raise ValueError(f"hidden_dims must be positive widths, got {config.hidden_dims}")
    if len(set(config.heads)) != len(config.heads) or not config.heads:
        raise ValueError(f"heads must be a non-empty list of distinct names: {config.heads}")
    if config.batch_size > n_train:
        raise ValueError(
            f"batch_size ({config.batch_size}) is larger than the training set ({n_train} rows)"
        )
    counts = np.asarray(label_counts, dtype=np.float64)
    if counts.shape != (len(config.heads),):
        raise ValueError(
            f"label_counts has shape {counts.shape}, expected one count per head "
            f"({len(config.heads)})"
        )
    empty = tuple(h for h, c in zip(config.heads, counts, strict=True) if c <= 0)
    if empty and config.class_weighting:
        if not config.mask_zero_positive_heads:
            raise ValueError(
                f"head {empty[0]!r} has zero positive training examples, so its class "
                "weight would be infinite; add positives, turn class_weighting off, or "
                "set mask_zero_positive_heads to train without it"
            )
        if len(empty) == len(config.heads):
            raise ValueError("every head has zero positive training examples")
        return empty
    return ()
