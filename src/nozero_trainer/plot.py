"""``nozero-train plot RUN_DIR``: one PNG that shows how a run went.

Four panels over steps, read from the run's ``metrics.jsonl``: training loss, gradient norm
(log scale), learning rate, and every head's holdout PR-AUC. Halts, restarts and resumes
are drawn as vertical lines on every panel, so a reader sees at once where a run broke.
After a restart the steps run again from the checkpoint; each stretch is drawn on its own.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nozero._atomic import atomic_output
from nozero_trainer.runlog import read_metrics

TRAIN_EVENTS = (None, "train")  # per-step records, with or without an event tag
MARKERS = {"halt": ("tab:red", "-"), "restart": ("tab:orange", "--"), "resume": ("0.5", ":")}


class PlotUnavailable(RuntimeError):
    """matplotlib is an optional extra; say how to get it instead of a bare ImportError."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as err:
        raise PlotUnavailable(
            "nozero-train plot needs matplotlib: pip install 'nozero[plot]'"
        ) from err
    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    return plt


def _stretches(points: Iterable[tuple[float, float]]) -> list[tuple[list[float], list[float]]]:
    """Split (step, value) points where the step goes back (a restart or a resume)."""
    stretches: list[tuple[list[float], list[float]]] = []
    last = -math.inf
    for step, value in points:
        if not stretches or step < last:
            stretches.append(([], []))
        stretches[-1][0].append(step)
        stretches[-1][1].append(value)
        last = step
    return stretches


def _series(records: Sequence[Mapping[str, Any]], key: str) -> list[tuple[float, float]]:
    return [
        (float(r["step"]), float(r[key]))
        for r in records
        if r.get("event") in TRAIN_EVENTS and key in r and "step" in r
    ]


def plot_run(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Draw ``run_dir/metrics.jsonl`` into a PNG (default ``run_dir/run.png``); return its path."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics}: no metrics file, so nothing to plot")
    plt = _pyplot()
    fig = draw_run(read_metrics(metrics), title=f"run {run_dir.name}")
    out_path = Path(out) if out is not None else run_dir / "run.png"
    with atomic_output(out_path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    return out_path


def draw_run(records: Sequence[Mapping[str, Any]], title: str = "") -> Any:
    """The run's figure (four panels sharing the step axis) from its metrics records."""
    plt = _pyplot()
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    panels = [("loss", "training loss", "linear"), ("grad_norm", "gradient norm", "log")]
    panels.append(("lr", "learning rate", "linear"))
    for axis, (key, label, scale) in zip(axes, panels, strict=False):
        for xs, ys in _stretches(_series(records, key)):
            axis.plot(xs, ys, color="tab:blue", linewidth=1)
        axis.set_ylabel(label)
        if scale == "log" and any(v > 0 for _, v in _series(records, key)):
            axis.set_yscale("log")
    _plot_pr_auc(axes[3], [r for r in records if r.get("event") == "eval"])
    for record in records:
        style = MARKERS.get(str(record.get("event")))
        if style is None or "step" not in record:
            continue
        for axis in axes:
            axis.axvline(float(record["step"]), color=style[0], linestyle=style[1], linewidth=1.2)
        axes[0].annotate(
            str(record["event"]),
            (float(record["step"]), 1.0),
            xycoords=("data", "axes fraction"),
            color=style[0],
            fontsize=8,
            va="bottom",
        )
    axes[-1].set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _plot_pr_auc(axis: Any, evals: Sequence[Mapping[str, Any]]) -> None:
    heads: list[str] = []
    for record in evals:
        heads += [h for h in record.get("pr_auc", {}) if h not in heads]
    for head in heads:
        points = [
            (float(r["step"]), float(r["pr_auc"][head]))
            for r in evals
            if head in r.get("pr_auc", {})
            and r["pr_auc"][head] is not None
            and math.isfinite(float(r["pr_auc"][head]))
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            axis.plot(xs, ys, marker="o", markersize=3, linewidth=1, label=head)
    axis.set_ylabel("holdout PR-AUC")
    axis.set_ylim(0, 1.02)
    if heads:
        axis.legend(fontsize=7, ncol=2, loc="lower right")
