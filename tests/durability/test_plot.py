"""``plot_run``: a real PNG from a real metrics file; a clear error without matplotlib."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import matplotlib.image
import pytest
from matplotlib.colors import to_hex

from nozero_trainer.plot import _stretches, draw_run, plot_run
from nozero_trainer.runlog import MetricsLog, read_metrics, read_status, write_status


def _write(run_dir, records):
    with MetricsLog(run_dir / "metrics.jsonl", append=False) as log:
        for record in records:
            log.write(record)


def _metrics(run_dir):
    records = [{"step": s, "loss": 1.0 / (s + 1), "grad_norm": 0.5, "lr": 1e-3} for s in range(30)]
    records.insert(10, {"event": "eval", "step": 10, "pr_auc": {"A": 0.4, "B": None}})
    records.append({"event": "halt", "step": 30})
    records.append({"event": "restart", "step": 20})
    records += [{"step": s, "loss": 0.1, "grad_norm": 0.4, "lr": 5e-4} for s in range(20, 40)]
    records.append({"event": "eval", "step": 40, "pr_auc": {"A": 0.7, "B": None}})
    _write(run_dir, records)


def _diverging(run_dir, attempts=3):
    """Every attempt's loss climbs to ~1e35 and halts at step 12, before any evaluation."""
    records = []
    for attempt in range(attempts):
        if attempt:
            records.append({"event": "restart", "step": 0, "restart": attempt})
        records += [
            {"event": "train", "step": s, "loss": 0.7 * 1e3**s, "grad_norm": 10.0**s, "lr": 1e3}
            for s in range(12)
        ]
        records.append(
            {
                "event": "train",
                "step": 12,
                "loss": float("inf"),
                "grad_norm": float("nan"),
                "lr": 1e3,
            }
        )
        records.append({"event": "halt", "step": 12, "loss": float("inf")})
    _write(run_dir, records)
    write_status(run_dir, {"status": "halted", "step": 12, "config": {"eval_every": 50}})


def test_writes_a_png(tmp_path):
    _metrics(tmp_path)
    out = plot_run(tmp_path)
    assert out == tmp_path / "run.png"
    image = matplotlib.image.imread(out)
    assert image.shape[0] > 500 and image.shape[1] > 500
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "run.png"]


def test_a_restart_starts_a_new_stretch():
    assert _stretches([(0, 1), (1, 2), (1, 3), (0, 4), (1, 5)]) == [
        ([0, 1, 1], [1, 2, 3]),
        ([0, 1], [4, 5]),
    ]


def test_missing_metrics_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"metrics\.jsonl: no metrics file"):
        plot_run(tmp_path)


def test_without_matplotlib_the_error_says_how_to_install_it(tmp_path):
    _metrics(tmp_path)
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["matplotlib"] = None  # as if the [plot] extra were not installed
        from nozero_trainer.plot import PlotUnavailable, plot_run
        try:
            plot_run({str(tmp_path)!r})
        except PlotUnavailable as err:
            print(err)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'nozero[plot]'" in result.stdout
    assert not (tmp_path / "run.png").exists()


def test_halts_and_restarts_are_marked_on_every_panel(tmp_path):
    _metrics(tmp_path)
    fig = draw_run(read_metrics(tmp_path / "metrics.jsonl"))
    for axis in fig.axes:
        vertical = sorted(
            line.get_xdata()[0]
            for line in axis.get_lines()
            if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2
        )
        assert vertical == [20.0, 30.0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["halt at step 30", "restart 1 from step 20"]
    loss_lines = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) > 2]
    assert len(loss_lines) == 2  # the restart starts a second stretch of steps
    # Each attempt has its colour; the halt ends the first, the restart begins the second.
    first, second = (to_hex(line.get_color()) for line in loss_lines)
    assert first != second
    halt, restart = (to_hex(h.get_color()) for h in fig.legends[0].legend_handles)
    assert (halt, restart) == (first, second)
    pr_auc = fig.axes[3]
    assert [t.get_text() for t in pr_auc.get_legend().get_texts()] == ["A"]  # B: all NaN


def _texts(axis):
    return " ".join(t.get_text() for t in axis.texts) + " " + axis.get_title(loc="left")


def test_a_divergence_is_drawn_on_log_axes_and_the_missing_evaluation_is_explained(tmp_path):
    _diverging(tmp_path)
    fig = draw_run(read_metrics(tmp_path / "metrics.jsonl"), status=read_status(tmp_path))
    loss, grad_norm, lr, pr_auc = fig.axes
    assert loss.get_yscale() == "log" and grad_norm.get_yscale() == "log"
    assert lr.get_yscale() == "linear"
    assert "not finite, so not drawn: step 12 (inf)" in _texts(loss)
    note = _texts(pr_auc)
    assert "every attempt halted before its first evaluation (due at step 50)" in note
    assert "at steps 12, 12, 12" in note
    # Three halts and two restarts at one step: every event has its own legend entry, in
    # the colour of its attempt, and the attempts' colours differ.
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [
        "halt at step 12",
        "restart 1 from step 0",
        "halt at step 12",
        "restart 2 from step 0",
        "halt at step 12",
    ]
    colors = [to_hex(h.get_color()) for h in fig.legends[0].legend_handles]
    assert len({colors[0], colors[2], colors[4]}) == 3
    assert colors[1] == colors[2] and colors[3] == colors[4]
    curves = {to_hex(line.get_color()) for line in loss.get_lines() if len(line.get_xdata()) > 2}
    assert curves == {colors[0], colors[2], colors[4]}
    plot_run(tmp_path)  # and it renders


def test_a_single_early_halt_names_its_step(tmp_path):
    _diverging(tmp_path, attempts=1)
    fig = draw_run(read_metrics(tmp_path / "metrics.jsonl"), status=read_status(tmp_path))
    assert "the run halted at step 12, before its first evaluation (due at step 50)" in _texts(
        fig.axes[3]
    )


def test_a_smooth_run_keeps_linear_axes_and_the_legends_sit_outside_the_panels(tmp_path):
    _metrics(tmp_path)
    fig = draw_run(read_metrics(tmp_path / "metrics.jsonl"))
    assert [a.get_yscale() for a in fig.axes] == ["linear"] * 4  # 1/30 .. 1: under 100x
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels_right = max(a.get_window_extent().x1 for a in fig.axes)
    for legend in [*fig.legends, fig.axes[3].get_legend()]:
        assert legend.get_window_extent(renderer).x0 >= panels_right
    assert "not drawn, no holdout positives (PR-AUC undefined): B" in _texts(fig.axes[3])


def test_a_short_run_has_whole_steps_on_its_axis(tmp_path):
    records = [{"step": s, "loss": 0.5, "grad_norm": 0.1, "lr": 1e-3} for s in range(5)]
    fig = draw_run(records)
    fig.canvas.draw()
    ticks = [t for t in fig.axes[-1].get_xticks() if 0 <= t <= 4]
    assert len(ticks) >= 3 and all(float(t).is_integer() for t in ticks)


def test_a_run_shorter_than_eval_every_is_due_its_evaluation_at_its_end(tmp_path):
    _diverging(tmp_path, attempts=1)
    write_status(tmp_path, {"status": "halted", "config": {"steps": 300, "eval_every": 500}})
    fig = draw_run(read_metrics(tmp_path / "metrics.jsonl"), status=read_status(tmp_path))
    note = _texts(fig.axes[3])
    assert "before its first evaluation (due at step 300)" in note and "500" not in note
