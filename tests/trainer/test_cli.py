"""``nozero-train`` end to end: real shards, real runs, real subprocesses."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nozero import MESSAGE_PATTERN
from nozero_trainer.cli import build_parser, main
from nozero_trainer.config import RunOptions, TrainConfig
from nozero_trainer.heads import DEFAULT_HEADS
from nozero_trainer.progress import format_number

SMALL = [
    "--steps",
    "40",
    "--batch-size",
    "16",
    "--warmup-steps",
    "4",
    "--hidden-dims",
    "16",
    "--sync-every",
    "20",
    "--chunk-steps",
    "20",
    "--peak-lr",
    "0.01",
]


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-m", "nozero_trainer.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _train(data: Path, out: Path, *flags: str) -> int:
    """``nozero-train train`` through its entry point in this process."""
    return main(["train", "--data", str(data), "--out", str(out), *flags])


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
    assert all(math.isfinite(e["loss"]) and "lr" in e and "focal_mean_weight" in e for e in train)
    (evaluation,) = [e for e in events if e["event"] == "eval"]
    assert set(evaluation["pr_auc"]) == set(DEFAULT_HEADS)
    assert evaluation["positives"]["FollowBot"] > 0
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "finished" and status["step"] == 40
    assert all(head in out for head in DEFAULT_HEADS)


def test_bad_setting_exits_2_naming_it(synthetic_dir, tmp_path, capsys):
    code = _train(synthetic_dir, tmp_path / "r", *SMALL, "--focal-gamma", "-1")
    assert code == 2
    assert "--focal-gamma: must be finite and >= 0, got -1.0" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before anything was created
    with pytest.raises(SystemExit) as usage:
        main(["train", "--data", str(synthetic_dir)])  # argparse: --out is required
    assert usage.value.code == 2


def test_every_bad_setting_is_reported_at_once_before_the_data_is_read(tmp_path, capsys):
    bad = ["--steps", "0", "--peak-lr", "-1", "--hidden-dims", "8,x", "--seed", "1.5"]
    code = _train(tmp_path / "nowhere", tmp_path / "r", *bad, "--max-restarts", "-1")
    assert code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "nozero-train: error: 6 bad settings:"
    flags = [line.split(":")[0].strip() for line in lines[1:]]
    assert sorted(flags) == sorted(
        ["--hidden-dims", "--seed", "--steps", "--peak-lr", "--max-restarts", "--data"]
    )
    assert list(tmp_path.iterdir()) == []


def test_a_setting_the_data_rules_out_creates_nothing(synthetic_dir, tmp_path, capsys):
    code = _train(synthetic_dir, tmp_path / "r", *SMALL, "--batch-size", "100000")
    assert code == 2
    assert "--batch-size: 100000 is larger than the training set" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_help_shows_every_default():
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices
    for name in ("train", "demo", "make-data"):
        for action in subcommands[name]._actions:
            if action.dest == "help" or action.required or not action.option_strings:
                continue
            assert "(default: " in (action.help or ""), (name, action.option_strings)
    train_help = " ".join(subcommands["train"].format_help().split())
    assert "1/20 of --steps" in train_help and "0 = only at the end" in train_help
    assert "(default: 2000)" in train_help
    assert "(default: 2000)" in subcommands["demo"].format_help()


def test_every_train_setting_is_a_flag():
    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    dests = {a.dest for a in train._actions}
    fields = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata["flag"]}
    fields |= {f.name for f in dataclasses.fields(RunOptions)}
    assert fields <= dests and "heads" not in dests


def test_eval_every_zero_evaluates_once_at_the_end(synthetic_dir, tmp_path):
    run = tmp_path / "run"
    assert (
        main(
            ["train", "--data", str(synthetic_dir), "--out", str(run), *SMALL, "--eval-every", "0"]
        )
        == 0
    )
    assert [e["step"] for e in _events(run) if e["event"] == "eval"] == [40]


def test_numbers_print_in_exponent_form_when_huge_or_tiny():
    assert format_number(234661751937599585386496.0) == "2.347e+23"
    assert format_number(0.0123456) == "0.01235"
    assert format_number(1.5e-7) == "1.500e-07"
    assert format_number(float("inf")) == "inf"


def test_bad_data_exits_2_naming_the_directory(tmp_path, capsys):
    code = main(["train", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "r")])
    assert code == 2
    assert "missing: data directory does not exist" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_halt_exits_3_with_the_documented_error_and_no_finished_marker(synthetic_dir, tmp_path):
    run = tmp_path / "run"
    done = _cli(
        "train",
        "--data",
        str(synthetic_dir),
        "--out",
        str(run),
        *SMALL,
        "--peak-lr",
        "1e6",
        "--sync-every",
        "4",
        "--chunk-steps",
        "4",
    )
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stderr.splitlines() if MESSAGE_PATTERN.fullmatch(line)]
    assert len(lines) == 1
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "halted"
    halt = [e for e in _events(run) if e["event"] == "halt"]
    assert len(halt) == 1 and str(halt[0]["step"]) in lines[0]
    assert not [e for e in _events(run) if e["event"] == "eval"]
    # The progress never runs past the halt, and never shows the non-finite step.
    progress = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    shown = [int(re.match(r"step\s+(\d+)/", line)[1]) for line in progress]
    assert shown and max(shown) <= halt[0]["step"]
    assert not any(word in line for line in progress for word in ("inf", "nan"))
    assert re.search(r"loss \d\.\d{3}e\+\d\d ", progress[-1]), progress[-1]


def test_progress_reports_compilation_apart_and_a_recent_rate(synthetic_dir, tmp_path):
    done = _cli(
        "train",
        "--data",
        str(synthetic_dir),
        "--out",
        str(tmp_path / "run"),
        *SMALL,
        "--sync-every",
        "10",
        "--chunk-steps",
        "10",
        "--seed",
        "7",
    )
    assert done.returncode == 0, done.stderr
    compiled = [line for line in done.stderr.splitlines() if line.startswith("compiled in ")]
    assert compiled and "not counted in steps/s" in compiled[0]
    rates = re.findall(r"([\d.]+) steps/s", done.stderr)
    assert len(rates) == 4 and all(float(r) > 0 for r in rates)


# What the shipped demo reaches (measured: `nozero-train demo`, 2,000 steps, seed 0, on the
# project's 2-core machine), and how far below it a run may land before it is a regression.
# A 60-step demo reaches 0.07-0.70, far below these floors.
DEMO_PR_AUC = {
    "FollowBot": 0.7228,
    "LikeBot": 0.6895,
    "EngagementAmplifier": 0.6510,
    "ReplySpamBot": 0.6123,
    "TweetSpamBot": 0.6102,
    "RTBot": 0.3969,
    "MultiActionBot": 0.5703,
    "LegitimateUser": 0.8996,
}
DEMO_MARGIN = 0.05


def _demo_pr_auc(*args: str) -> dict[str, float]:
    done = _cli("demo", *args, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {}
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line.strip())
        if match:
            rows[match[1]] = float(match[4])
    assert set(rows) == set(DEFAULT_HEADS), done.stdout
    return rows


def _below_floor(pr_auc: dict[str, float]) -> dict[str, float]:
    return {h: v for h, v in pr_auc.items() if v < DEMO_PR_AUC[h] - DEMO_MARGIN}


def test_the_demo_reaches_its_measured_quality_and_a_short_demo_does_not():
    """The real demo, as shipped: the one slow test (about 30 s on two cores)."""
    assert _below_floor(_demo_pr_auc()) == {}
    # The floors bite: the same demo stopped at 60 steps falls below every one of them.
    assert set(_below_floor(_demo_pr_auc("--steps", "60"))) == set(DEFAULT_HEADS)
