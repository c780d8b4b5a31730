"""``nozero-train`` end to end: real shards, real runs, real subprocesses."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nozero import MESSAGE_PATTERN
from nozero_trainer.cli import main
from nozero_trainer.heads import DEFAULT_HEADS

SMALL = ["--steps", "40", "--batch-size", "16", "--warmup-steps", "4", "--hidden-dims", "16",
         "--sync-every", "20", "--chunk-steps", "20", "--peak-lr", "0.01"]


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "nozero_trainer.cli", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_make_data_then_train_writes_metrics_and_finished_status(tmp_path, capsys):
    assert main(["make-data", str(tmp_path / "data"), "--rows", "800", "--dim", "16"]) == 0
    run = tmp_path / "run"
    assert main(["train", "--data", str(tmp_path / "data"), "--out", str(run), *SMALL]) == 0
    out, err = capsys.readouterr()
    assert "step     40/40" in err and "dropped" in err  # progress and load report
    events = _events(run)
    train = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train] == list(range(40))
    assert all(math.isfinite(e["loss"]) and "lr" in e and "focal_mean_weight" in e
               for e in train)
    (evaluation,) = [e for e in events if e["event"] == "eval"]
    assert set(evaluation["pr_auc"]) == set(DEFAULT_HEADS)
    assert evaluation["positives"]["FollowBot"] > 0
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "finished" and status["step"] == 40
    assert all(head in out for head in DEFAULT_HEADS)


def test_bad_setting_exits_2_naming_it(synthetic_dir, tmp_path, capsys):
    code = main(["train", "--data", str(synthetic_dir), "--out", str(tmp_path / "r"), *SMALL,
                 "--focal-gamma", "-1"])
    assert code == 2
    assert "--focal-gamma" in capsys.readouterr().err
    assert not (tmp_path / "r" / "status.json").exists()  # refused before anything ran
    with pytest.raises(SystemExit) as usage:
        main(["train", "--data", str(synthetic_dir)])  # argparse: --out is required
    assert usage.value.code == 2


def test_bad_data_exits_2_naming_the_directory(tmp_path, capsys):
    code = main(["train", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "r")])
    assert code == 2
    assert "missing: data directory does not exist" in capsys.readouterr().err


def test_halt_exits_3_with_the_documented_error_and_no_finished_marker(synthetic_dir, tmp_path):
    run = tmp_path / "run"
    done = _cli("train", "--data", str(synthetic_dir), "--out", str(run), *SMALL,
                "--peak-lr", "1e30")
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stderr.splitlines() if MESSAGE_PATTERN.fullmatch(line)]
    assert len(lines) == 1
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "halted"
    halt = [e for e in _events(run) if e["event"] == "halt"]
    assert len(halt) == 1 and str(halt[0]["step"]) in lines[0]
    assert not [e for e in _events(run) if e["event"] == "eval"]


def test_demo_beats_every_positive_rate():
    """The real demo, as shipped: the one slow test."""
    done = _cli("demo", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line.strip())
        if match:
            rows[match[1]] = (float(match[3]), float(match[4]))
    assert set(rows) == set(DEFAULT_HEADS), done.stdout
    for head, (rate, pr_auc) in rows.items():
        assert pr_auc > rate, (head, rate, pr_auc)
