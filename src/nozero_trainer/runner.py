"""One training run end to end: load, validate, train with progress, evaluate, record.

The run directory gets ``metrics.jsonl`` (one JSON object per line: ``train`` events
per step, ``eval`` events, a ``halt`` event) and ``status.json``, written atomically.
Only a run that completed says ``"status": "finished"``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import jax
import numpy as np

from nozero import NonFiniteError
from nozero_trainer import loop
from nozero_trainer.config import TrainConfig, validate
from nozero_trainer.data import Split, load_dataset
from nozero_trainer.loss import head_weighting
from nozero_trainer.metrics import average_precision
from nozero_trainer.model import Params, apply_model
from nozero_trainer.optim import make_schedule

log = logging.getLogger("nozero_trainer")


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclasses.dataclass
class Evaluation:
    """Per-head holdout results; ``nan`` PR-AUC where a head has no positives."""

    pr_auc: dict[str, float]
    positives: dict[str, int]
    positive_rate: dict[str, float]


@dataclasses.dataclass
class RunSummary:
    out_dir: Path
    state: loop.TrainState
    evaluation: Evaluation
    masked_heads: tuple[str, ...]


_score = jax.jit(lambda params, x: jax.nn.sigmoid(apply_model(params, x)))


def predict(params: Params, cls: np.ndarray) -> np.ndarray:
    """Per-head probabilities ``[n, H]`` for embeddings ``cls``."""
    return np.asarray(_score(params, cls))


def evaluate(params: Params, split: Split) -> Evaluation:
    """Average precision of every head on ``split``."""
    ap = average_precision(predict(params, split.cls), split.labels)
    positives = split.labels.sum(axis=0)
    rows = max(len(split), 1)
    return Evaluation(
        pr_auc={h: float(v) for h, v in zip(split.heads, ap, strict=True)},
        positives={h: int(p) for h, p in zip(split.heads, positives, strict=True)},
        positive_rate={h: float(p) / rows for h, p in zip(split.heads, positives, strict=True)},
    )


class Progress:
    """Periodic progress lines on stderr: step, a bar, loss, gradient norm, speed."""

    def __init__(self, total: int, start: int, stream: IO[str]) -> None:
        self.total, self.start, self.stream = total, start, stream
        self.started = time.perf_counter()

    def update(self, step: int, loss: float, grad_norm: float, lr: float) -> None:
        done = step / self.total
        bar = "#" * int(24 * done) + "." * (24 - int(24 * done))
        rate = (step - self.start) / max(time.perf_counter() - self.started, 1e-9)
        print(
            f"step {step:>6}/{self.total} [{bar}] loss {loss:.4f} grad_norm {grad_norm:.3g} "
            f"lr {lr:.2e} {rate:.1f} steps/s",
            file=self.stream, flush=True,
        )


def run_training(
    config: TrainConfig, data_dir: str | Path, out_dir: str | Path, *,
    stream: IO[str] = sys.stderr,
) -> RunSummary:
    """Train ``config`` on ``data_dir`` into ``out_dir``; raises ``NonFiniteError`` on a halt."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train, holdout = load_dataset(data_dir, config.heads)
    label_counts = train.labels.sum(axis=0)
    masked = validate(config, len(train), label_counts)
    if masked:
        log.warning("WARNING: heads with zero training positives are MASKED OUT of the loss: "
                    "%s", ", ".join(masked))
    weights, mask = head_weighting(config.class_weighting, label_counts, len(train),
                                   len(config.heads), config.mask_zero_positive_heads)

    write_json_atomic(out_dir / "status.json", {"status": "running", "config": config.to_dict(),
                                                "data_dir": str(data_dir)})
    schedule = make_schedule(config)
    progress = Progress(config.steps, 0, stream)
    metrics = (out_dir / "metrics.jsonl").open("w")

    def on_history(first: int, values: dict[str, np.ndarray]) -> None:
        steps = np.arange(first, first + values["loss"].size)
        lrs = np.asarray(schedule(steps), dtype=np.float64)
        columns = {k: v.tolist() for k, v in values.items()}
        for i, step in enumerate(steps.tolist()):
            event = {"event": "train", "step": step, "lr": lrs[i],
                     **{k: columns[k][i] for k in columns}}
            metrics.write(json.dumps(event) + "\n")
        metrics.flush()
        progress.update(int(steps[-1]) + 1, columns["loss"][-1], columns["grad_norm"][-1],
                        float(lrs[-1]))

    with metrics:
        try:
            result = loop.train_arrays(config, train.cls, train.labels, head_weights=weights,
                                       head_mask=mask, on_history=on_history)
        except NonFiniteError as err:
            halt = {"event": "halt", "step": err.step, "loss": err.loss,
                    "grad_norm": err.grad_norm, "lr": float(schedule(err.step)),
                    "message": str(err)}
            metrics.write(json.dumps(halt) + "\n")
            write_json_atomic(out_dir / "status.json", {**halt, "status": "halted",
                                                        "config": config.to_dict()})
            raise
        evaluation = evaluate(result.state.params, holdout)
        metrics.write(json.dumps({"event": "eval", "step": result.state.step,
                                  "pr_auc": evaluation.pr_auc,
                                  "positives": evaluation.positives}) + "\n")
    write_json_atomic(out_dir / "status.json", {
        "status": "finished", "step": result.state.step, "config": config.to_dict(),
        "data_dir": str(data_dir), "pr_auc": evaluation.pr_auc,
        "masked_heads": list(masked),
    })
    return RunSummary(out_dir, result.state, evaluation, masked)


def format_evaluation(evaluation: Evaluation) -> str:
    """A table of every head's holdout PR-AUC beside its positive rate (the chance level)."""
    lines = [f"{'head':<22}{'positives':>10}{'pos. rate':>11}{'PR-AUC':>9}{'x chance':>10}"]
    for head, ap in evaluation.pr_auc.items():
        rate = evaluation.positive_rate[head]
        lift = ap / rate if rate > 0 else float("nan")
        lines.append(f"{head:<22}{evaluation.positives[head]:>10}{rate:>11.4f}{ap:>9.4f}"
                     f"{lift:>10.1f}")
    return "\n".join(lines)
