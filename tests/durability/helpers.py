"""How the durability tests run ``nozero-train``: a tiny configuration and real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# A tiny model and frequent syncs/evaluations: compiles in seconds, checkpoints often.
TINY = {
    "steps": 200,
    "batch_size": 32,
    "hidden_dims": (8,),
    "warmup_steps": 10,
    "eval_every": 50,
    "sync_every": 25,
    "chunk_steps": 25,
}


def tiny_flags(**overrides: object) -> list[str]:
    """``TINY`` (with overrides) as ``nozero-train train`` flags."""
    flags = []
    for key, value in {**TINY, **overrides}.items():
        if isinstance(value, tuple):
            value = ",".join(map(str, value)) or "none"
        flags += [f"--{key.replace('_', '-')}", str(value)]
    return flags


def nozero_train(*args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI in a fresh process, as a user would."""
    command = [sys.executable, "-m", "nozero_trainer.cli", *map(str, args)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


@contextmanager
def killed_after(process: subprocess.Popen, seconds: float) -> Iterator[None]:
    """Kill ``process`` after ``seconds`` unless the block is done: a line-by-line read of
    its output would otherwise wait forever on a run that hangs without printing."""
    watchdog = threading.Timer(seconds, process.kill)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
