"""Helpers for tests that start real processes: every one runs under a hard time limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

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


def launch_worker(mode: str, out: Path, *extra: str, **kwargs) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    return launch([sys.executable, str(WORKER), mode, str(out), *extra], **kwargs)


def records(out: Path, processes: int = 2) -> list[dict]:
    return [json.loads((out / f"p{i}.json").read_text()) for i in range(processes)]


def final_params(out: Path, process: int) -> list[np.ndarray]:
    with np.load(out / f"p{process}.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]
