"""Every training setting in one frozen, hashable record: its default, its help, its checks.

Each field carries its ``--flag`` help in its metadata, so the command line is generated
from this class and a setting's name, default and meaning live in one place. The config
is hashable so compiled training functions can be cached on it, and it round-trips
through JSON so a run directory records exactly what produced it.

No numpy or JAX here: ``nozero-train --help`` and the checks of every setting work on
the base install, before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nozero_trainer.heads import DEFAULT_HEADS

FLOAT32_MAX = 3.4028234663852886e38  # training runs in float32
WARMUP_FRACTION = 20  # the default warmup is 1/20 of the run: 100 steps of 2,000


def setting(
    default: Any,
    help: str,
    *,
    parse: Callable[[str], Any] | None = None,
    shown: str | None = None,
    choices: Sequence[str] | None = None,
    flag: bool = True,
    off_help: str | None = None,
) -> Any:
    """A config field with its command-line help (``shown`` replaces the printed default).

    A switch that is on by default gets a ``--no-`` flag, whose help is ``off_help``: what
    turning it off does.
    """
    metadata = {
        "help": help,
        "parse": parse,
        "shown": shown,
        "choices": choices,
        "flag": flag,
        "off_help": off_help,
    }
    return dataclasses.field(default=default, metadata=metadata)


def parse_widths(text: str) -> tuple[int, ...]:
    """``512,256`` -> ``(512, 256)``; ``none`` (or empty) -> ``()``, a linear model."""
    if text.strip().lower() in ("", "none", "linear"):
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError as err:
        raise ValueError(f"expected widths like 512,256 or 'none', got {text!r}") from err


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run (the CLI flags are generated from these fields)."""

    steps: int = setting(2000, "optimizer steps to run")
    batch_size: int = setting(
        256,
        "training rows per step, across every device and process; divisible by the device count",
    )
    peak_lr: float = setting(1e-3, "learning rate reached at the end of the warmup")
    warmup_steps: int | None = setting(
        None,
        "steps of linear warmup from 0 to --peak-lr",
        parse=int,
        shown=f"1/{WARMUP_FRACTION} of --steps, rounded down",
    )
    end_lr_ratio: float = setting(
        0.05, "final learning rate as a fraction of --peak-lr (cosine decay)"
    )
    focal_gamma: float = setting(2.0, "focal exponent; 0 = plain cross-entropy")
    focal_alpha: float | None = setting(
        None, "weight of positives in [0, 1]", parse=float, shown="unset: no alpha weighting"
    )
    label_smoothing: float = setting(0.0, "label smoothing in [0, 1)")
    reverse_ce_weight: float = setting(0.1, "weight of the reverse cross-entropy term")
    hidden_dims: tuple[int, ...] = setting(
        (512, 256),
        "hidden widths, comma-separated; 'none' for a linear model",
        parse=parse_widths,
        shown="512,256",
    )
    eval_every: int = setting(
        500, "steps between holdout evaluations and checkpoints; 0 = only at the end"
    )
    seed: int = setting(0, "seed of the initial weights and of the batch order")
    sync_every: int = setting(
        100, "steps between host checks of the guard (the halt step is exact regardless)"
    )
    chunk_steps: int = setting(50, "steps per device dispatch")
    clip_norm: float = setting(1.0, "global gradient norm clipped to this")
    weight_decay: float = setting(1e-4, "AdamW weight decay")
    class_weighting: bool = setting(
        True,
        "weigh each head by its class-balanced weight",
        off_help="weigh every head equally (default: each head by its class-balanced weight)",
    )
    mask_zero_positive_heads: bool = setting(
        False, "train without heads that have no positives instead of refusing"
    )
    heads: tuple[str, ...] = setting(DEFAULT_HEADS, "the heads, in output order", flag=False)

    def __post_init__(self) -> None:
        # Lists from JSON or callers become tuples so the config stays hashable.
        if isinstance(self.hidden_dims, Iterable) and not isinstance(self.hidden_dims, str):
            object.__setattr__(self, "hidden_dims", tuple(self.hidden_dims))
        object.__setattr__(self, "heads", tuple(str(h) for h in self.heads))
        if self.warmup_steps is None:  # the default scales with the run, so any length works
            steps = self.steps if isinstance(self.steps, int) else 0
            object.__setattr__(self, "warmup_steps", max(steps, 0) // WARMUP_FRACTION)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists, the warmup its resolved number)."""
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


ON_NONFINITE = ("halt", "restart")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run survives trouble and what it writes; none of these change what it learns."""

    resume: bool = setting(False, "continue from the run directory's latest checkpoint")
    holdout_scores_out: Path | None = setting(
        None,
        "write every holdout row's per-head scores to this parquet file",
        parse=Path,
        shown="not written",
    )
    on_nonfinite: str = setting(
        "halt",
        "on a non-finite step: halt, or restart from the last good checkpoint with half "
        "the learning rate",
        choices=ON_NONFINITE,
    )
    max_restarts: int = setting(3, "restarts allowed with --on-nonfinite restart")
    # One process of a multi-process run (else the environment's, else one process).
    coordinator: str | None = setting(
        None,
        "HOST:PORT of process 0's coordinator, for a multi-process run",
        parse=str,
        shown="none",
    )
    num_processes: int | None = setting(
        None, "processes in the run (with --coordinator)", parse=int, shown="none"
    )
    process_id: int | None = setting(
        None, "this process's index, 0 .. N-1 (with --coordinator)", parse=int, shown="none"
    )

    def problems(self) -> list[Problem]:
        """Every bad option; empty when all are good."""
        problems = []
        if self.on_nonfinite not in ON_NONFINITE:
            problems.append(
                Problem("on_nonfinite", f"must be one of {ON_NONFINITE}, got {self.on_nonfinite!r}")
            )
        if not (_is_int(self.max_restarts) and self.max_restarts >= 0):
            problems.append(
                Problem("max_restarts", f"must be an integer >= 0, got {self.max_restarts!r}")
            )
        return problems


# --- checks ---------------------------------------------------------------------------------


def flag_name(name: str) -> str:
    """The command-line flag of setting ``name`` (``warmup_steps`` -> ``--warmup-steps``)."""
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One bad setting: which, and what is wrong with it."""

    setting: str
    message: str
    # False when ``message`` is a sentence of its own rather than what the setting "must be".
    about_setting: bool = True

    def __str__(self) -> str:
        """For Python callers: ``focal_gamma must be ..., got -1.0 (--focal-gamma)``."""
        subject = f"{self.setting} " if self.about_setting else ""
        return f"{subject}{self.message} ({flag_name(self.setting)})"

    def as_flag(self) -> str:
        """For the command line: ``--focal-gamma: must be ..., got -1.0``."""
        return f"{flag_name(self.setting)}: {self.message}"


class SettingsError(ValueError):
    """Every bad setting of a run at once, each naming its flag."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(map(str, self.problems)))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_settings(config: TrainConfig) -> list[Problem]:
    """Every problem of ``config`` that needs no data; empty when all settings are good."""
    problems: list[Problem] = []

    def need(ok: bool, name: str, message: str) -> None:
        if not ok:
            problems.append(Problem(name, f"{message}, got {getattr(config, name)!r}"))

    for name in ("steps", "batch_size", "sync_every", "chunk_steps"):
        need(
            _is_int(getattr(config, name)) and getattr(config, name) > 0,
            name,
            "must be a positive integer",
        )
    need(
        _is_int(config.eval_every) and config.eval_every >= 0,
        "eval_every",
        "must be an integer >= 0 (0 = evaluate only at the end)",
    )
    need(_is_int(config.seed), "seed", "must be an integer")
    steps = config.steps if _is_int(config.steps) and config.steps > 0 else None
    warmup = config.warmup_steps
    if not (_is_int(warmup) and warmup >= 0):
        need(False, "warmup_steps", "must be an integer >= 0")
    elif steps is not None and warmup >= steps:
        problems.append(
            Problem(
                "warmup_steps",
                f"must be shorter than the run (--steps {steps}), got {warmup}",
            )
        )
    need(
        _finite(config.peak_lr) and 0 < config.peak_lr <= FLOAT32_MAX,
        "peak_lr",
        "must be positive and finite in float32",
    )
    need(
        _finite(config.end_lr_ratio) and 0 <= config.end_lr_ratio <= 1,
        "end_lr_ratio",
        "must be in [0, 1]",
    )
    need(
        _finite(config.focal_gamma) and config.focal_gamma >= 0,
        "focal_gamma",
        "must be finite and >= 0",
    )
    alpha = config.focal_alpha
    need(
        alpha is None or (_finite(alpha) and 0 <= alpha <= 1),
        "focal_alpha",
        "must be in [0, 1] (or unset)",
    )
    need(
        _finite(config.label_smoothing) and 0 <= config.label_smoothing < 1,
        "label_smoothing",
        "must be in [0, 1)",
    )
    need(
        _finite(config.reverse_ce_weight) and config.reverse_ce_weight >= 0,
        "reverse_ce_weight",
        "must be finite and >= 0",
    )
    need(
        _finite(config.clip_norm) and config.clip_norm > 0,
        "clip_norm",
        "must be positive and finite",
    )
    need(
        _finite(config.weight_decay) and config.weight_decay >= 0,
        "weight_decay",
        "must be finite and >= 0",
    )
    need(
        all(_is_int(d) and d > 0 for d in config.hidden_dims),
        "hidden_dims",
        "must be positive widths",
    )
    need(
        bool(config.heads) and len(set(config.heads)) == len(config.heads),
        "heads",
        "must be a non-empty list of distinct names",
    )
    return problems


def check_data(
    config: TrainConfig, n_train: int, label_counts: Sequence[float]
) -> tuple[tuple[str, ...], list[Problem]]:
    """The heads to mask out, and the settings the loaded training data rules out.

    A head with zero training positives has an infinite class-balanced weight, so it is
    refused while class weighting is on, unless ``mask_zero_positive_heads`` asks to
    train without it.
    """
    problems: list[Problem] = []
    if _is_int(config.batch_size) and config.batch_size > n_train:
        problems.append(
            Problem(
                "batch_size",
                f"{config.batch_size} is larger than the training set ({n_train} rows)",
            )
        )
    counts = [float(c) for c in label_counts]
    if len(counts) != len(config.heads):
        raise ValueError(
            f"label_counts has {len(counts)} entries, expected one count per head "
            f"({len(config.heads)})"
        )
    empty = tuple(h for h, c in zip(config.heads, counts, strict=True) if c <= 0)
    if not (empty and config.class_weighting):
        return (), problems
    if len(empty) == len(config.heads):
        problems.append(
            Problem("heads", "every head has zero positive training examples", about_setting=False)
        )
    elif not config.mask_zero_positive_heads:
        names = ", ".join(repr(h) for h in empty)
        which = f"head {names} has" if len(empty) == 1 else f"heads {names} have"
        problems.append(
            Problem(
                "mask_zero_positive_heads",
                f"{which} zero positive training examples, so the class weight would be "
                "infinite; add positives, pass --no-class-weighting, or pass "
                "--mask-zero-positive-heads to train without them",
                about_setting=False,
            )
        )
    return empty, problems


def validate(config: TrainConfig, n_train: int, label_counts: Sequence[float]) -> tuple[str, ...]:
    """Refuse every bad setting at once (``SettingsError``); return the heads masked out."""
    problems = check_settings(config)
    masked, data_problems = check_data(config, n_train, label_counts)
    if problems or data_problems:
        raise SettingsError(problems + data_problems)
    return masked
