"""Helpers for tests that start real processes: every one runs under a hard time limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
WORKER = HERE / "worker.py"
# Starts the processes of one run through the real launcher.
LAUNCHER = (
    "import sys; from nozero_trainer.launch import run_processes; "
    "sys.exit(run_processes(sys.argv[3:], int(sys.argv[1]), int(sys.argv[2])))"
)


def launch(
    args: list[str],
    processes: int = 2,
    devices: int = 2,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``processes`` x ``devices`` copies of ``args`` through ``run_processes``."""
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(processes), str(devices), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def start_worker(mode: str, out: Path) -> subprocess.Popen:
    """The launcher of a 2 x 2 worker run, running; its stderr is a pipe to read."""
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, "2", "2", sys.executable, str(WORKER), mode, str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def launch_worker(mode: str, out: Path, *extra: str, **kwargs) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    return launch([sys.executable, str(WORKER), mode, str(out), *extra], **kwargs)


def records(out: Path, processes: int = 2) -> list[dict]:
    return [json.loads((out / f"p{i}.json").read_text()) for i in range(processes)]


def final_params(out: Path, process: int) -> list[np.ndarray]:
    with np.load(out / f"p{process}.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


@pytest.fixture(scope="session")
def shard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real parquet shards: 4 per split, so two processes read two each."""
    from nozero_trainer.synthetic import make_data

    return make_data(tmp_path_factory.mktemp("scale") / "data", 600, 16, 0, shards=4)


def run_cli(
    *args: object,
    devices: int | None = None,
    timeout: float = 90,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``nozero-train ARGS`` in a fresh process, with ``devices`` forced host devices."""
    extra = dict(env or {})
    if devices is not None:
        extra["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return subprocess.run(
        [sys.executable, "-m", "nozero_trainer.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **extra},
    )


def checkpoint_params(run: Path) -> dict[str, np.ndarray]:
    """The latest checkpoint's parameters, by name."""
    from nozero_trainer.checkpoint import latest_checkpoint
    from nozero_trainer.pytree_npz import read_npz

    return read_npz(latest_checkpoint(run) / "params.npz")
