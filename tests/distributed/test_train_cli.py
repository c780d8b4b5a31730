"""``nozero-train train`` data parallel: 2 processes x 2 devices and 4 devices against one.

Every process here is real and has a hard time limit; references run in this process on
its one CPU device, with the same seed and global batch.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from durability.helpers import killed_after, tiny_flags

from nozero import MESSAGE_PATTERN, NonFiniteError
from nozero_trainer.config import TrainConfig
from nozero_trainer.launch import free_port
from nozero_trainer.pytree_npz import tree_to_arrays
from nozero_trainer.runner import run_training

from .conftest import checkpoint_params, run_cli

SETTINGS = {
    "steps": 12,
    "batch_size": 8,
    "hidden_dims": (16,),
    "warmup_steps": 2,
    "eval_every": 6,
    "sync_every": 3,
    "chunk_steps": 3,
}


def flags(**overrides: object) -> list[str]:
    return tiny_flags(**{**SETTINGS, **overrides})


def train_flags(data, out, **overrides) -> list[str]:
    return ["train", "--data", str(data), "--out", str(out), *flags(**overrides)]


def launch_train(data, out, processes=2, devices=2, **overrides):
    return run_cli(
        "launch",
        "--processes",
        processes,
        "--devices-per-process",
        devices,
        "--",
        *train_flags(data, out, **overrides),
        timeout=120,
    )


def assert_same_params(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_two_processes_end_allclose_to_one_device(shard_dir, tmp_path):
    run = tmp_path / "run"
    done = launch_train(shard_dir, run)
    assert done.returncode == 0, done.stderr[-3000:]
    for process in (0, 1):
        assert f"[p{process}] finished at step 12" in done.stdout
        # Every process saw the whole split's totals, not its share's.
        assert f"[p{process}] {shard_dir}/train: kept 422 of 480 rows from 4 shard(s)" in (
            done.stderr
        )
    reference = run_training(TrainConfig(**SETTINGS), shard_dir, tmp_path / "ref")
    assert_same_params(checkpoint_params(run), tree_to_arrays(reference.state.params))


def test_absurd_learning_rate_halts_every_process_at_the_one_device_step(shard_dir, tmp_path):
    with pytest.raises(NonFiniteError) as one_device:
        run_training(TrainConfig(**{**SETTINGS, "peak_lr": 1e30}), shard_dir, tmp_path / "ref")
    message = str(one_device.value)
    assert MESSAGE_PATTERN.fullmatch(message)
    run = tmp_path / "run"
    done = launch_train(shard_dir, run, peak_lr=1e30)
    assert done.returncode == 3, done.stderr[-3000:]
    for process in (0, 1):
        assert f"[p{process}] {message}\n" in done.stderr
    status = json.loads((run / "status.json").read_text())
    assert (status["status"], status["step"]) == ("halted", one_device.value.step)
    # One bundle, by process 0, saying where each row of the global batch was.
    (bundle,) = (run / "postmortem").iterdir()
    holders = json.loads((bundle / "halt.json").read_text())["holders"]
    assert {(p["process"], p["device"]) for p in holders["positions"]} == {
        (0, 0),
        (0, 1),
        (1, 2048),
        (1, 2049),
    }
    assert holders["poisoned"], "every row's outputs overflow after a 1e30 update"


def test_batch_that_does_not_divide_by_the_devices_is_refused_before_anything(shard_dir, tmp_path):
    run = tmp_path / "run"
    done = launch_train(shard_dir, run, batch_size=6)
    assert done.returncode == 2, done.stderr[-3000:]
    for process in (0, 1):
        assert (
            f"[p{process}] nozero-train: error: --batch-size: batch_size (6) is the global "
            "batch and must divide by the device count (4)"
        ) in done.stderr
    assert not run.exists()


def test_unreachable_coordinator_is_a_clear_error_within_its_timeout(shard_dir, tmp_path):
    run = tmp_path / "run"
    started = time.monotonic()
    done = run_cli(
        *train_flags(shard_dir, run),
        "--coordinator",
        f"127.0.0.1:{free_port()}",
        "--num-processes",
        2,
        "--process-id",
        1,
        env={"NOZERO_JOIN_TIMEOUT": "3"},
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("nozero-train: error: could not join coordinator 127.0.0.1:")
    )
    assert "Check failure stack trace" not in done.stderr
    assert not run.exists()


def _start_pair(data, run, counts: tuple[int, int]) -> list[subprocess.Popen]:
    coordinator = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "NOZERO_JOIN_TIMEOUT": "5"}
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nozero_trainer.cli",
                *train_flags(data, run),
                "--coordinator",
                coordinator,
                "--num-processes",
                str(count),
                "--process-id",
                str(index),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for index, count in enumerate(counts)
    ]


@pytest.mark.parametrize("counts", [(2, 3), (3, 2)])
def test_mismatched_process_counts_are_a_clear_error_on_every_process(shard_dir, tmp_path, counts):
    run = tmp_path / "run"
    processes = _start_pair(shard_dir, run, counts)
    try:
        ends = [p.communicate(timeout=60) for p in processes]
    finally:
        for p in processes:
            p.kill()
    for process, (_, err) in zip(processes, ends, strict=True):
        assert process.returncode == 2, err[-2000:]
        last = err.strip().splitlines()[-1]
        if counts == (2, 3):  # both joined the coordinator's 2-process run: both refuse it
            assert last == (
                "nozero-train: error: the processes disagree on --num-processes "
                "(process 0: 2, process 1: 3); the coordinator's run has 2 "
                "processes"
            )
        else:  # the coordinator waits for a third process that never comes
            assert last.startswith("nozero-train: error: could not join coordinator")
    assert not run.exists()


def _kill_after_second_eval(command: list[str], devices: int) -> None:
    """Start a run, SIGKILL it once it printed its second evaluation (a checkpoint exists)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "nozero_trainer.cli", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        seen = 0
        with killed_after(process, 90):  # no second evaluation in time ends the read
            for line in process.stderr:
                seen += line.startswith("eval at step")
                if seen == 2:
                    break
        assert seen == 2, "no second evaluation in time"
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.communicate(timeout=30)


@pytest.mark.parametrize(("before", "after"), [(4, 1), (1, 4)])
def test_resume_after_a_kill_on_another_device_count(shard_dir, tmp_path, before, after):
    settings = {**SETTINGS, "steps": 30, "eval_every": 10, "sync_every": 5, "chunk_steps": 5}
    run = tmp_path / "run"
    command = [*train_flags(shard_dir, run, **settings), "--resume"]
    _kill_after_second_eval(command, before)
    done = run_cli(*command, devices=after, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resume: continuing from checkpoint step-000000" in done.stderr
    assert "finished at step 30" in done.stdout
    reference = run_training(TrainConfig(**settings), shard_dir, tmp_path / "ref")
    assert_same_params(checkpoint_params(run), tree_to_arrays(reference.state.params))


def test_a_shard_only_process_one_reads_stops_every_process_with_its_error(shard_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(shard_dir, data)
    broken = data / "train" / "part-00003.parquet"  # in process 1's block (shards 2 and 3)
    broken.write_bytes(b"not parquet at all")
    run = tmp_path / "run"
    done = launch_train(data, run)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "nozero-train: error:" in line]
    assert len(errors) == 2
    (message,) = {line.split("] ", 1)[1] for line in errors}  # the same on both
    assert message.startswith(f"nozero-train: error: {broken}: not a readable parquet file")
    assert message.endswith("(on process 1)")
    assert not run.exists()
