"""The reference trainer as ``pytest --nozero`` sees it (``nozero_trainer`` in pyproject).

Small, fixed shapes keep the contract run fast and let every example reuse one compiled
step; the settings are otherwise the trainer's own defaults (MLP head, focal loss with
class-balanced weights, clipped AdamW), so the contract tests the real guard.

``sharded_trainer`` is the same trainer data parallel over 4 forced host devices. The
device count is fixed when JAX starts, so it trains in a process of its own, started
once per test process: ``run`` sends it the batches and gets back the per-step record or
the halt (the documented error, pickled), each call under a time limit.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import select
import struct
import subprocess
import sys
from typing import IO, Any

import numpy as np

from nozero.testing import TrainerUnderTest
from nozero_trainer.config import TrainConfig
from nozero_trainer.loop import compile_count, train_on_batches

BATCH = 8
IN_DIM = 16
# Positives per head in an imagined training set of N_ROWS rows: turns class weighting on.
N_ROWS = 1000
POSITIVE_RATE = 0.2


def contract_config() -> TrainConfig:
    """The defaults, shrunk: a narrow hidden layer and a warm-up that fits a short run."""
    return dataclasses.replace(TrainConfig(), hidden_dims=(32,), warmup_steps=2, batch_size=BATCH)


def make_clean_batch(rng: np.random.Generator, n_heads: int) -> dict[str, np.ndarray]:
    """Unit-normal embeddings and multi-hot labels, as the loader produces them."""
    cls = rng.standard_normal((BATCH, IN_DIM)).astype(np.float32)
    labels = (rng.random((BATCH, n_heads)) < POSITIVE_RATE).astype(np.float32)
    return {"cls": cls, "labels": labels}


def reference_trainer() -> TrainerUnderTest:
    """Factory named by ``nozero_trainer = nozero_trainer.contract_target:reference_trainer``."""
    n_heads = len(contract_config().heads)

    def run(batches: list[dict[str, np.ndarray]]) -> list[tuple[float, float]]:
        return _train_history(batches)

    return TrainerUnderTest(
        batch_spec={
            "cls": ((BATCH, IN_DIM), np.float32),
            "labels": ((BATCH, n_heads), np.float32),
        },
        run=run,
        check_every=1,  # the guard reports the exact step
        make_clean_batch=lambda rng: make_clean_batch(rng, n_heads),
        vary_fields=("cls",),  # labels are multi-hot: rescaling them is not clean data
        compile_count=compile_count,
    )


SHARDED_DEVICES = 4
CALL_TIMEOUT = 300  # seconds one call to the sharded trainer's process may take


def _train_history(batches: list[dict[str, np.ndarray]], placement: Any = None):
    config = contract_config()
    n_heads = len(config.heads)
    result = train_on_batches(
        config,
        batches,
        in_dim=IN_DIM,
        n_heads=n_heads,
        class_counts=np.full(n_heads, POSITIVE_RATE * N_ROWS),
        n_rows=N_ROWS,
        placement=placement,
    )
    return result.history


def _send(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes], timeout: float | None = None) -> Any:
    if timeout is not None and not select.select([stream], [], [], timeout)[0]:
        raise TimeoutError(f"the sharded trainer's process did not answer in {timeout} s")
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the sharded trainer's process ended")
    (size,) = struct.unpack("<Q", header)
    return pickle.loads(stream.read(size))


class _ShardedProcess:
    """The process the sharded trainer runs in, with its own forced host devices."""

    _shared: _ShardedProcess | None = None

    def __init__(self) -> None:
        flags = os.environ.get("XLA_FLAGS", "")
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={SHARDED_DEVICES}",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nozero_trainer.contract_target"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        atexit.register(self.close)

    @classmethod
    def shared(cls) -> _ShardedProcess:
        if cls._shared is None or cls._shared.process.poll() is not None:
            cls._shared = cls()
        return cls._shared

    def call(self, request: str, *args: Any) -> Any:
        _send(self.process.stdin, (request, args))
        ok, value = _receive(self.process.stdout, CALL_TIMEOUT)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def sharded_trainer() -> TrainerUnderTest:
    """Factory ``nozero_trainer.contract_target:sharded_trainer``: 4 devices, global batch 8."""
    server = _ShardedProcess.shared()
    n_heads = len(contract_config().heads)
    return TrainerUnderTest(
        batch_spec={
            "cls": ((BATCH, IN_DIM), np.float32),
            "labels": ((BATCH, n_heads), np.float32),
        },
        run=lambda batches: server.call("run", batches),
        check_every=1,
        make_clean_batch=lambda rng: make_clean_batch(rng, n_heads),
        vary_fields=("cls",),
        compile_count=lambda: server.call("compile_count"),
    )


def _serve() -> None:
    """Answer ``run`` and ``compile_count`` requests on stdin/stdout until stdin closes."""
    from nozero_trainer.sharding import check_global_batch, data_placement

    placement = data_placement()
    if placement.devices != SHARDED_DEVICES:
        raise RuntimeError(
            f"expected {SHARDED_DEVICES} forced host devices, JAX sees {placement.devices}"
        )
    check_global_batch(BATCH, placement)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the answers
    handlers = {
        "run": lambda batches: _train_history(batches, placement),
        "compile_count": compile_count,
    }
    while True:
        try:
            request, args = _receive(requests)
        except EOFError:
            return
        try:
            answer = (True, handlers[request](*args))
        except Exception as err:  # handed to the caller, raised there
            answer = (False, err)
        _send(answers, answer)


if __name__ == "__main__":
    _serve()
