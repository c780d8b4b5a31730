"""``nozero-train`` as a user runs it: resume, refusals, halts, post-mortems, restarts, plots.

Most calls go through the real entry point in this process (``main(argv)``), so they share
compiled steps; the halt is also run as a separate process to check its exit status and
output end to end.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from nozero.contract import MESSAGE_PATTERN
from nozero_trainer import checkpoint as ckpt
from nozero_trainer.cli import main
from nozero_trainer.postmortem import find_bundles

from .helpers import nozero_train, tiny_flags

EXIT_USAGE, EXIT_HALT = 2, 3
# Step 1 is the first with a learning rate (warmup 1). Its update, from the initial
# parameters, scales the weights with the rate, and step 2's logits overflow float32 once
# the rate passes about 1e37 (measured: 9.5e36 trains, 1e37 halts). This rate halts at
# step 2, before the first checkpoint; half of it (7e36) trains through.
DIVERGING = dict(
    hidden_dims=(),
    peak_lr=1.4e37,
    weight_decay=0.0,
    warmup_steps=1,
    steps=3,
    eval_every=3,
    sync_every=1,
    chunk_steps=1,
)


@dataclasses.dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys):
    """Run ``nozero-train ARGS`` through its real entry point and capture what it prints."""

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.fixture
def train(cli, data_dir):
    def run(out, *extra, **overrides):
        return cli("train", "--data", data_dir, "--out", out, *tiny_flags(**overrides), *extra)

    return run


def _documented_lines(stderr):
    return [line for line in stderr.splitlines() if MESSAGE_PATTERN.fullmatch(line)]


def _files(directory):
    return {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_resume_without_checkpoint_starts_at_zero_then_refuses_other_settings(train, tmp_path):
    out = tmp_path / "run"
    first = train(out, "--resume", steps=50)
    assert first.returncode == 0, first.stderr
    assert f"resume: {out} has no checkpoint yet: starting from step 0" in first.stderr
    assert "finished at step 50 after 0 restart(s)" in first.stdout
    before = _files(out / "checkpoints")

    refused = train(out, "--resume", "--seed", "1", steps=50, peak_lr=0.002)
    assert refused.returncode == EXIT_USAGE
    assert "cannot resume, the run's configuration differs from the command line" in refused.stderr
    assert "peak_lr: run directory has 0.001, command line has 0.002" in refused.stderr
    assert "seed: run directory has 0, command line has 1" in refused.stderr

    again = train(out, steps=50)  # without --resume a run directory is never overwritten
    assert again.returncode == EXIT_USAGE and "pass --resume to continue it" in again.stderr
    assert _files(out / "checkpoints") == before

    finished = train(out, "--resume", steps=50)  # nothing left to do: evaluates and ends
    assert finished.returncode == 0 and "continuing from checkpoint" in finished.stderr


def test_a_damaged_checkpoint_is_refused_by_name_and_left_alone(train, tmp_path):
    out = tmp_path / "run"
    assert train(out, steps=50).returncode == 0
    params = ckpt.latest_checkpoint(out) / "params.npz"
    params.write_bytes(params.read_bytes()[:100])
    before = _files(out / "checkpoints")
    result = train(out, "--resume", steps=50)
    assert result.returncode == EXIT_USAGE
    assert f"{params}: unreadable or truncated" in result.stderr
    assert _files(out / "checkpoints") == before


def test_other_hidden_widths_are_refused_on_resume(train, tmp_path):
    out = tmp_path / "run"
    assert train(out, steps=50).returncode == 0
    result = train(out, "--resume", steps=50, hidden_dims=(4,))
    assert result.returncode == EXIT_USAGE
    assert "hidden_dims: run directory has [8], command line has [4]" in result.stderr


def test_a_halt_leaves_a_bundle_and_the_postmortem_command_diagnoses_it(data_dir, tmp_path):
    out = tmp_path / "run"
    flags = tiny_flags(peak_lr=1e30)
    result = nozero_train("train", "--data", data_dir, "--out", out, *flags)
    assert result.returncode == EXIT_HALT
    [message] = _documented_lines(result.stderr)
    [bundle] = find_bundles(out)
    assert f"post-mortem bundle: {bundle}" in result.stderr
    assert sorted(p.name for p in bundle.iterdir()) == [
        "batch.npz",
        "config.json",
        "halt.json",
        "opt_state.npz",
        "params.npz",
    ]
    halt = json.loads((bundle / "halt.json").read_text())
    assert halt["message"] == message and halt["learning_rate"] > 1e20
    assert set(halt["loss_terms"]) == {"bce", "rce", "focal_mean_weight", "weighted per-head loss"}
    with np.load(bundle / "batch.npz", allow_pickle=False) as batch:
        assert batch["cls"].shape == (32, 16) and batch["row_indices"].shape == (32,)
    with np.load(bundle / "params.npz", allow_pickle=False) as params:
        assert all(np.isfinite(params[k]).all() for k in params.files)
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "halted" and status["step"] == halt["step"]
    assert ckpt.latest_checkpoint(out) is None  # it halted before its first evaluation

    diagnosis = nozero_train("postmortem", out)
    assert diagnosis.returncode == 0, diagnosis.stderr
    text = diagnosis.stdout
    assert f"halted at step {halt['step']}" in text
    assert "inputs: every value of the batch is finite" in text
    assert "float64 re-run of the step" in text
    assert halt["repeat"]["identical"] is True  # re-run twice where it failed: same bits
    assert "(where it failed): bitwise identical" in text
    assert "(here): bitwise identical" in text
    assert "Lower --peak-lr" in text


def test_postmortem_of_a_run_that_never_halted_is_a_usage_error(cli, tmp_path):
    result = cli("postmortem", tmp_path)
    assert result.returncode == EXIT_USAGE and "no post-mortem bundle here" in result.stderr


def test_restart_halves_the_learning_rate_and_finishes(train, tmp_path):
    out = tmp_path / "run"
    result = train(out, "--on-nonfinite", "restart", "--max-restarts", "2", **DIVERGING)
    assert result.returncode == 0, result.stderr
    assert "RESTART 1/2" in result.stderr and "RESTART 2/2" not in result.stderr
    assert len(_documented_lines(result.stderr)) == 1
    assert "finished at step 3 after 1 restart(s)" in result.stdout
    assert len(find_bundles(out)) == 1
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "finished" and status["restarts"] == 1
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    [restart] = [e for e in events if e.get("event") == "restart"]
    assert restart == {**restart, "step": 0, "halted_step": 2, "lr_scale": 0.5}
    assert "restarting from step 0 (no checkpoint yet)" in result.stderr
    manifest = ckpt.verify_checkpoint(ckpt.latest_checkpoint(out))
    assert manifest["step"] == 3 and manifest["state"] == {"lr_scale": 0.5, "restarts": 1}


def test_restarts_are_bounded(train, tmp_path):
    out = tmp_path / "run"
    result = train(out, "--on-nonfinite", "restart", "--max-restarts", "1", steps=50, peak_lr=1e30)
    assert result.returncode == EXIT_HALT
    assert "RESTART 1/1" in result.stderr and "RESTART 2/" not in result.stderr
    assert len(_documented_lines(result.stderr)) == 2  # every halt is reported, loudly
    assert len(find_bundles(out)) == 2
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "halted" and status["restarts"] == 1


def test_plot_command_writes_a_png(train, cli, tmp_path):
    out = tmp_path / "run"
    assert train(out, steps=50).returncode == 0
    result = cli("plot", out, "--out", tmp_path / "run.png")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = cli("plot", tmp_path / "nothing")
    assert missing.returncode == EXIT_USAGE and "no metrics file" in missing.stderr
