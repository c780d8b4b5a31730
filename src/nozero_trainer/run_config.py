"""The run configuration: what a run directory records about the run that made it.

It is written with every checkpoint and post-mortem as stable, sorted, strict JSON, and
``--resume`` compares it with the command line's, setting by setting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nozero_trainer import strict_json

# Settings of the run configuration that define the model: a checkpoint saved with other
# values cannot be loaded into it.
MODEL_SETTINGS = ("heads", "hidden_dims", "in_dim")


def run_configuration(
    settings: Mapping[str, Any], data_dir: str | Path, train: Any, holdout: Any
) -> dict[str, Any]:
    """Everything that determines a run's result: settings, data (shards and sizes), width.

    ``train`` and ``holdout`` are the loaded splits. Saved with every checkpoint;
    ``--resume`` refuses a command line that differs from it.
    """
    return {
        **settings,
        "data_dir": str(Path(data_dir).resolve()),
        "shards": {
            "train": [list(s) for s in train.stats.shards],
            "holdout": [list(s) for s in holdout.stats.shards],
        },
        "in_dim": int(train.cls.shape[1]),
    }


def config_to_json(config: Mapping[str, Any], sort_keys: bool = True) -> str:
    """The run configuration as stable, diffable JSON (``sort_keys=False`` keeps an order)."""
    return strict_json.dumps(config, indent=2, sort_keys=sort_keys) + "\n"


def normalise_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration as it reads back from JSON (tuples become lists, paths strings)."""
    return strict_json.loads(config_to_json(config))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def config_differences(
    saved: Mapping[str, Any], current: Mapping[str, Any], ignore: tuple[str, ...] = ()
) -> list[str]:
    """Name every setting whose saved value differs from the current one.

    Both sides are compared as they read back from JSON, so ``(512, 256)`` equals
    ``[512, 256]``. ``ignore`` lists settings allowed to change between runs.
    """
    saved_n, current_n = normalise_config(saved), normalise_config(current)
    differences = []
    for key in sorted(set(saved_n) | set(current_n)):
        if key in ignore:
            continue
        old, new = saved_n.get(key, "<absent>"), current_n.get(key, "<absent>")
        if not _same(old, new):
            differences.append(f"{key}: run directory has {old!r}, command line has {new!r}")
    return differences
