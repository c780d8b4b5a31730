"""``nozero-train plot RUN_DIR``: one PNG that shows how a run went, and how it failed.

Four panels over steps, read from the run's ``metrics.jsonl``: training loss, gradient
norm, learning rate, and every head's holdout PR-AUC. A panel whose values span more than
two orders of magnitude is drawn on a log scale, so a divergence to 1e35 shows as the
climb it is. Halts, restarts and resumes are vertical lines on every panel, listed once
per event in a legend beside the panels (never over the data). What is missing is said on
the panel: no evaluation before a halt, a head without positives, non-finite values the
line cannot show. After a restart or a resume the steps run again from the checkpoint;
each attempt is drawn in its own colour, and so are the halt that ended it and the
restart that began it. Steps are whole numbers, so the step axis has integer ticks.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nozero._atomic import atomic_output
from nozero_trainer.runlog import METRICS, read_metrics, read_status

TRAIN_EVENTS = (None, "train")  # per-step records, with or without an event tag
# Line style per event kind; the colour is the attempt's (the one the event ended or began).
MARKERS = {"halt": "-", "restart": "--", "resume": ":", "interrupted": "-."}
# One colour per attempt, cycled; the heads' PR-AUC lines use matplotlib's own cycle.
ATTEMPT_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")
# Events that start a new attempt (the steps run again from there).
STARTS = ("restart", "resume")
LOG_SPAN = 100.0  # positive values spanning more than this factor get a log axis
# (key, label, may use a log axis): the learning rate's warmup starts at 0 and reads best
# on a linear axis; loss and gradient norm are where a divergence shows.
PANELS = (
    ("loss", "training loss", True),
    ("grad_norm", "gradient norm", True),
    ("lr", "learning rate", False),
)
NOTE_STYLE = {"ha": "center", "va": "center", "fontsize": 9, "color": "0.25", "wrap": True}


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
        if r.get("event") in TRAIN_EVENTS and r.get(key) is not None and "step" in r
    ]


def wants_log_scale(values: Iterable[float]) -> bool:
    """True when the finite positive values span more than :data:`LOG_SPAN`."""
    positive = [v for v in values if math.isfinite(v) and v > 0]
    return bool(positive) and max(positive) / min(positive) > LOG_SPAN


def plot_run(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Draw ``run_dir/metrics.jsonl`` into a PNG (default ``run_dir/run.png``); return its path."""
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics}: no metrics file, so nothing to plot")
    plt = _pyplot()
    fig = draw_run(read_metrics(metrics), title=f"run {run_dir.name}", status=read_status(run_dir))
    out_path = Path(out) if out is not None else run_dir / "run.png"
    with atomic_output(out_path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    return out_path


def draw_run(
    records: Sequence[Mapping[str, Any]],
    title: str = "",
    status: Mapping[str, Any] | None = None,
) -> Any:
    """The run's figure (four panels sharing the step axis) from its metrics records.

    ``status`` (the run's ``status.json``) lets a note say when the first evaluation
    was due.
    """
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(4, 1, figsize=(11, 10), sharex=True)
    for axis, (key, label, log) in zip(axes, PANELS, strict=False):
        _plot_series(axis, records, key, label, log)
    config = (status or {}).get("config") or {}
    _plot_pr_auc(axes[3], records, first_evaluation(config))
    _mark_events(fig, axes, records)
    axes[-1].set_xlabel("step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))  # no step 2.5 on short runs
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.8, 1))  # the right fifth holds the legends
    return fig


def first_evaluation(config: Mapping[str, Any]) -> int | None:
    """The step of a run's first evaluation: every ``eval_every`` steps, and at the end."""
    eval_every, steps = config.get("eval_every"), config.get("steps")
    if isinstance(steps, int) and steps > 0 and (not eval_every or eval_every > steps):
        return steps
    return eval_every or None


def attempt_color(attempt: int) -> str:
    """The colour of attempt ``attempt`` (0 = the first) on every panel."""
    return ATTEMPT_COLORS[attempt % len(ATTEMPT_COLORS)]


def _attempts(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """Per record, the attempt it belongs to: a restart or a resume begins the next one."""
    attempt, out = 0, []
    for record in records:
        if record.get("event") in STARTS:
            attempt += 1
        out.append(attempt)
    return out


def _plot_series(
    axis: Any, records: Sequence[Mapping[str, Any]], key: str, label: str, log: bool
) -> None:
    points = _series(records, key)
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    attempt_of = _attempts(records)
    by_attempt: dict[int, list[tuple[float, float]]] = {}
    for record, attempt in zip(records, attempt_of, strict=True):
        value = record.get(key)
        if record.get("event") in TRAIN_EVENTS and value is not None and "step" in record:
            if math.isfinite(float(value)):
                by_attempt.setdefault(attempt, []).append((float(record["step"]), float(value)))
    for attempt, attempt_points in by_attempt.items():
        for xs, ys in _stretches(attempt_points):
            axis.plot(xs, ys, color=attempt_color(attempt), linewidth=1)
    axis.set_ylabel(label)
    if log and wants_log_scale(v for _, v in finite):
        axis.set_yscale("log")
    bad = [(s, v) for s, v in points if not math.isfinite(v)]
    if bad:
        steps = ", ".join(f"{s:g} ({v})" for s, v in bad[:3]) + (" …" if len(bad) > 3 else "")
        axis.set_title(
            f"not finite, so not drawn: step {steps}", fontsize=8, color="tab:red", loc="left"
        )
    if not points:
        axis.text(0.5, 0.5, f"no {label} logged", transform=axis.transAxes, **NOTE_STYLE)


def _plot_pr_auc(axis: Any, records: Sequence[Mapping[str, Any]], due: int | None) -> None:
    evals = [r for r in records if r.get("event") == "eval"]
    heads: list[str] = []
    for record in evals:
        heads += [h for h in record.get("pr_auc", {}) if h not in heads]
    undefined: list[str] = []
    for head in heads:
        points = [
            (float(r["step"]), float(r["pr_auc"][head]))
            for r in evals
            if r.get("pr_auc", {}).get(head) is not None and math.isfinite(float(r["pr_auc"][head]))
        ]
        if not points:
            undefined.append(head)
            continue
        # One head, one colour; an attempt cut short by a restart is drawn fainter.
        stretches = _stretches(points)
        color = None
        for index, (xs, ys) in enumerate(stretches):
            last = index == len(stretches) - 1
            (line,) = axis.plot(
                xs,
                ys,
                marker="o",
                markersize=3,
                linewidth=1,
                color=color,
                alpha=1.0 if last else 0.35,
                label=head if last else None,
            )
            color = line.get_color()
    axis.set_ylabel("holdout PR-AUC")
    axis.set_ylim(0, 1.02)
    if len(undefined) < len(heads):
        axis.legend(
            fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0,
            title="head",
            title_fontsize=7,
        )
    if not evals:
        axis.text(
            0.5,
            0.5,
            _no_evaluation_note(records, due),
            transform=axis.transAxes,
            **NOTE_STYLE,
        )
    elif undefined:
        axis.text(
            0.02,
            0.06,
            f"not drawn, no holdout positives (PR-AUC undefined): {', '.join(undefined)}",
            transform=axis.transAxes,
            fontsize=8,
            color="0.25",
        )


def _no_evaluation_note(records: Sequence[Mapping[str, Any]], first: int | None) -> str:
    halts = [r for r in records if r.get("event") == "halt" and "step" in r]
    due = f" (due at step {first})" if first else ""
    if len(halts) == 1:
        return (
            f"no holdout evaluation: the run halted at step {halts[0]['step']}, "
            f"before its first evaluation{due}"
        )
    if halts:
        at = ", ".join(str(h["step"]) for h in halts)
        return (
            f"no holdout evaluation: every attempt halted before its first evaluation"
            f"{due}, at steps {at}"
        )
    return f"no holdout evaluation logged yet{due}"


def _event_label(record: Mapping[str, Any], attempt: int) -> str:
    """One legend line per event: what happened and at which step (its colour: the attempt)."""
    kind, step = str(record["event"]), f"{float(record['step']):g}"
    if kind == "restart":
        scale = record.get("lr_scale")
        rate = f", lr ×{scale:g}" if isinstance(scale, int | float) else ""
        return f"restart {record.get('restart', attempt)} from step {step}{rate}"
    if kind == "resume":
        return f"resume from step {step}"
    return f"{kind} at step {step}"


def _mark_events(fig: Any, axes: Sequence[Any], records: Sequence[Mapping[str, Any]]) -> None:
    """A vertical line per event on every panel, in its attempt's colour; a legend entry each."""
    handles = []
    for record, attempt in zip(records, _attempts(records), strict=True):
        kind = record.get("event")
        if kind not in MARKERS or "step" not in record:
            continue
        color = attempt_color(attempt)
        for axis in axes:
            line = axis.axvline(
                float(record["step"]), color=color, linestyle=MARKERS[kind], linewidth=1.2
            )
        line.set_label(_event_label(record, attempt))
        handles.append(line)
    if handles:
        fig.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(0.8, 0.97),
            fontsize=8,
            title="events (colour: attempt)",
            title_fontsize=8,
            frameon=False,
        )
