"""SIGTERM and SIGINT end a real ``nozero-train train`` process cleanly.

The run is a separate process sent a real signal once it has written checkpoints: it
exits with 128 + the signal's number, ``status.json`` says "interrupted", the checkpoint
``latest`` names is complete and verifies, no half-written file is left, and one line says
what happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from nozero_trainer import checkpoint as ckpt

from .helpers import TINY, killed_after, tiny_flags

# Long enough that the signal always lands mid-run; checkpoints every 20 steps.
LONG = {**TINY, "steps": 200_000, "eval_every": 20, "sync_every": 20, "chunk_steps": 20}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_run_as_interrupted_keeping_the_last_checkpoint(
    data_dir, tmp_path, signum
):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "nozero_trainer.cli", "train", "--data", str(data_dir)]
    command += ["--out", str(out), *tiny_flags(**LONG)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    seen = []
    with killed_after(process, 120):
        for line in process.stderr:
            seen.append(line)
            if sum(line.startswith("eval at step") for line in seen) == 3:
                break
        assert process.poll() is None, "".join(seen)
        process.send_signal(signum)
        stdout, rest = process.communicate(timeout=60)
    stderr = "".join(seen) + rest

    assert process.returncode == 128 + signum, stderr[-2000:]
    status = json.loads((out / "status.json").read_text())
    latest = ckpt.latest_checkpoint(out)
    manifest = ckpt.verify_checkpoint(latest)  # complete, every sha256 right
    assert status["status"] == "interrupted" and status["signal"] == signum.name
    assert status["checkpoint"] == latest.name
    assert manifest["step"] % LONG["eval_every"] == 0 and manifest["step"] <= status["step"]
    assert manifest["step"] >= 2 * LONG["eval_every"]  # the third may not be written yet
    assert not list((out / "checkpoints").glob(".tmp-*"))
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "metrics.jsonl", "status.json"]
    lines = [line for line in stderr.splitlines() if "interrupted" in line]
    assert lines == [
        f"nozero-train: interrupted by {signum.name} at step {status['step']}; checkpoint "
        f"{latest.name} (step {manifest['step']}) kept, continue with --resume"
    ]
    assert stderr.rstrip("\n").endswith(lines[0]) and stdout == ""
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert last == {"event": "interrupted", "step": status["step"]}


def test_a_signal_during_a_write_is_held_until_the_write_is_done():
    from nozero_trainer.interrupt import RunInterrupted, catch_signals, deferred

    finished = []
    with pytest.raises(RunInterrupted) as raised, catch_signals():
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            finished.append("write")  # the handler ran above; the write still completes
        finished.append("after")  # never reached: the held signal is raised here
    assert finished == ["write"] and raised.value.name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back
