"""SIGKILL at random moments: ``latest`` always names a complete checkpoint, resume finishes.

The run is a real ``nozero-train train --resume`` process, killed (SIGKILL: no cleanup,
no ``finally``) at a random moment after it has started checkpointing, several times over.
"""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import time

import jax
import numpy as np

from nozero_trainer import checkpoint as ckpt
from nozero_trainer import loop
from nozero_trainer.config import TrainConfig
from nozero_trainer.runlog import read_metrics
from nozero_trainer.runner import run_training

from .helpers import TINY, killed_after, tiny_flags

CRASH = {**TINY, "steps": 600, "eval_every": 20, "sync_every": 20, "chunk_steps": 20}
KILLS = 3


def _start(data_dir, out):
    command = [
        sys.executable,
        "-m",
        "nozero_trainer.cli",
        "train",
        "--data",
        str(data_dir),
        "--out",
        str(out),
        "--resume",
        *tiny_flags(**CRASH),
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )


def _kill_while_checkpointing(process, rng):
    """Kill a few milliseconds after a random evaluation line: mid-way through its checkpoint.

    The run prints ``eval at step N`` and then writes that step's checkpoint, so the kill
    lands anywhere in (or just after) the write: the moment a torn checkpoint could happen.
    """
    wanted = rng.randint(1, 8)
    seen = 0
    with killed_after(process, 120):
        for line in process.stderr:
            seen += line.startswith("eval at step")
            if seen == wanted:
                break
        time.sleep(rng.uniform(0.0, 0.05))
        alive = process.poll() is None
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    return alive


def test_sigkill_at_random_moments_then_resume_matches_an_uninterrupted_run(data_dir, tmp_path):
    rng = random.Random(5)
    out = tmp_path / "run"
    killed_steps = []
    for _ in range(KILLS):
        killed_while_running = _kill_while_checkpointing(_start(data_dir, out), rng)
        latest = ckpt.latest_checkpoint(out)
        assert latest is not None
        manifest = ckpt.verify_checkpoint(latest)  # complete, readable, every sha256 right
        assert manifest["step"] % CRASH["eval_every"] == 0
        killed_steps.append((manifest["step"], killed_while_running))
        read_metrics(out / "metrics.jsonl")  # a torn last line is tolerated, never fatal
    assert all(alive for _, alive in killed_steps), killed_steps  # each one killed mid-run
    steps = [step for step, _ in killed_steps]
    assert steps == sorted(steps) and steps[-1] < CRASH["steps"], killed_steps

    finish = _start(data_dir, out)
    _, stderr = finish.communicate(timeout=300)
    assert finish.returncode == 0, stderr[-2000:]
    assert "resume: continuing from checkpoint" in stderr

    config = TrainConfig(**CRASH)
    fresh = run_training(config, data_dir, tmp_path / "fresh", stream=io.StringIO())
    template = loop.init_state(config, 16, len(config.heads))
    final = ckpt.load_checkpoint(ckpt.latest_checkpoint(out), template.params, template.opt_state)
    assert final.step == CRASH["steps"]
    pairs = zip(
        jax.tree_util.tree_leaves(final.params),
        jax.tree_util.tree_leaves(fresh.state.params),
        strict=True,
    )
    for resumed, uninterrupted in pairs:
        np.testing.assert_allclose(
            np.asarray(resumed), np.asarray(uninterrupted), rtol=1e-5, atol=1e-6
        )
