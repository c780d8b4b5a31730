"""Writing and reading post-mortem bundles (``RUN_DIR/postmortem/halt-NN-step-SSSSSSSS/``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nozero._atomic import fsync_dir
from nozero_trainer import strict_json
from nozero_trainer.postmortem.replay import Repeat, StepReplay
from nozero_trainer.pytree_npz import nonfinite_leaves, read_npz, tree_to_arrays, write_npz
from nozero_trainer.run_config import config_to_json
from nozero_trainer.runlog import METRICS, read_metrics

POSTMORTEM_DIR = "postmortem"
ROW_INDICES = "row_indices"


@dataclass
class Bundle:
    """A post-mortem bundle read back from disk."""

    path: Path
    halt: dict[str, Any]
    batch: dict[str, np.ndarray]
    row_indices: np.ndarray
    params: dict[str, np.ndarray]
    opt_state: dict[str, np.ndarray]
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)


def write_bundle(
    run_dir: str | os.PathLike[str],
    *,
    step: int,
    loss: float,
    grad_norm: float,
    learning_rate: float,
    message: str,
    batch: Mapping[str, Any],
    row_indices: Any,
    params: Any,
    opt_state: Any,
    replay: StepReplay,
    config: Mapping[str, Any],
    heads: Sequence[str],
    restart: int = 0,
    repeat: Repeat | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a post-mortem bundle into ``run_dir/postmortem`` (assembled aside, then renamed).

    ``repeat`` is the bitwise comparison of two float32 re-runs of the step, made where
    the run failed. ``extra`` goes into ``halt.json`` as it is: whatever the replay needs beyond the
    configuration (the loss's per-head weights and mask, for instance).
    """
    root = Path(run_dir) / POSTMORTEM_DIR
    root.mkdir(parents=True, exist_ok=True)
    number = len(list(root.glob("halt-*"))) + 1
    name = f"halt-{number:02d}-step-{int(step):08d}"
    tmp = root / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    batch_arrays = {key: np.asarray(value) for key, value in batch.items()}
    batch_arrays[ROW_INDICES] = np.asarray(row_indices)
    write_npz(tmp / "batch.npz", batch_arrays)
    param_arrays = tree_to_arrays(params)
    write_npz(tmp / "params.npz", param_arrays)
    write_npz(tmp / "opt_state.npz", tree_to_arrays(opt_state))
    (tmp / "config.json").write_text(config_to_json(config), encoding="utf-8")
    halt = {
        "step": int(step),
        "loss": float(loss),
        "grad_norm": float(grad_norm),
        "learning_rate": float(learning_rate),
        "message": message,
        "restart": int(restart),
        "heads": list(heads),
        "loss_terms": {
            term: dict(zip(heads, values, strict=False)) for term, values in replay.terms.items()
        },
        "nonfinite_stages": replay.nonfinite_stages,
        "nonfinite_grad_leaves": replay.nonfinite_grad_leaves,
        "grad_leaf_count": replay.grad_leaf_count,
        "replay": {"dtype": replay.dtype, "loss": replay.loss, "grad_norm": replay.grad_norm},
        "update_norm": replay.update_norm,
        "largest_abs_update": replay.largest_abs_update,
        "nonfinite_update_leaves": replay.nonfinite_update_leaves,
        "repeat": None if repeat is None else repeat.to_json(),
        "nonfinite_param_leaves": nonfinite_leaves(params),
        "largest_abs_param": max(
            (float(np.max(np.abs(a))) for a in param_arrays.values() if a.size),
            default=0.0,
        ),
        **dict(extra or {}),
    }
    # Unsorted: loss terms keep their order of computation, heads the registry's order.
    (tmp / "halt.json").write_text(config_to_json(halt, sort_keys=False), encoding="utf-8")
    final = root / name
    os.rename(tmp, final)
    fsync_dir(root)
    return final


def find_bundles(path: str | os.PathLike[str]) -> list[Path]:
    """Bundles at ``path``: the bundle itself, or every bundle of a run directory, oldest first."""
    path = Path(path)
    if (path / "halt.json").is_file():
        return [path]
    return sorted(p for p in (path / POSTMORTEM_DIR).glob("halt-*") if (p / "halt.json").is_file())


def read_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read a bundle and the metrics history of the run it belongs to."""
    path = Path(path)
    try:
        halt = strict_json.loads((path / "halt.json").read_text(encoding="utf-8"))
        config = strict_json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ValueError(f"{err.filename}: not a post-mortem bundle (file is missing)") from err
    batch = read_npz(path / "batch.npz")
    row_indices = batch.pop(ROW_INDICES)
    run_dir = path.parent.parent
    return Bundle(
        path=path,
        halt=halt,
        batch=batch,
        row_indices=row_indices,
        params=read_npz(path / "params.npz"),
        opt_state=read_npz(path / "opt_state.npz"),
        config=config,
        history=read_metrics(run_dir / METRICS),
    )
