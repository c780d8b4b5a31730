"""``plot_run``: a real PNG from a real metrics file; a clear error without matplotlib."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import matplotlib.image
import pytest

from nozero_trainer.plot import _stretches, draw_run, plot_run
from nozero_trainer.runlog import read_metrics


def _metrics(run_dir):
    records = [{"step": s, "loss": 1.0 / (s + 1), "grad_norm": 0.5, "lr": 1e-3} for s in range(30)]
    records.insert(10, {"event": "eval", "step": 10, "pr_auc": {"A": 0.4, "B": float("nan")}})
    records.append({"event": "halt", "step": 30})
    records.append({"event": "restart", "step": 20})
    records += [{"step": s, "loss": 0.1, "grad_norm": 0.4, "lr": 5e-4} for s in range(20, 40)]
    records.append({"event": "eval", "step": 40, "pr_auc": {"A": 0.7, "B": float("nan")}})
    with open(run_dir / "metrics.jsonl", "w") as out:
        out.writelines(json.dumps(r) + "\n" for r in records)


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
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
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
    assert [t.get_text() for t in fig.axes[0].texts] == ["halt", "restart"]
    loss_lines = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) > 2]
    assert len(loss_lines) == 2  # the restart starts a second stretch of steps
    pr_auc = fig.axes[3]
    assert [t.get_text() for t in pr_auc.get_legend().get_texts()] == ["A"]  # B: all NaN
