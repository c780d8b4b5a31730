"""Two real processes under DDP (gloo, CPU): both ranks halt at the same exact step with
the same documented error, and a rank killed mid-run makes the other fail, not hang."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from nozero.contract import MESSAGE_PATTERN  # noqa: E402

WORKER = Path(__file__).with_name("ddp_worker.py")
BAD = 2  # ddp_worker.BAD
RUN_LIMIT = 90  # seconds for a whole two-process run (start-up on 2 busy cores included)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(*scenarios: str) -> list[subprocess.Popen]:
    port = str(_free_port())
    ranks = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
        }
        command = [sys.executable, str(WORKER), *scenarios]
        ranks.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        )
    return ranks


def _finish(ranks: list[subprocess.Popen], limit: float) -> list[tuple[int, str, str]]:
    """Each rank's (exit code, stdout, stderr); a rank still running at ``limit`` is killed
    and fails the test."""
    deadline = time.monotonic() + limit
    ended = []
    for proc in ranks:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            pytest.fail(f"a rank did not exit within {limit:g} s")
        ended.append((proc.returncode, out.decode(), err.decode()))
    return ended


SCENARIOS = ("batch:4", "batch:16", "loss:4", "clean:4")


@pytest.fixture(scope="module")
def results() -> dict[str, list[dict]]:
    """One two-process launch runs every scenario in turn: {scenario: [rank 0, rank 1]}."""
    by_scenario: dict[str, list[dict]] = {name: [] for name in SCENARIOS}
    for code, out, err in _finish(_start(*SCENARIOS), RUN_LIMIT):
        assert code == 0, err[-3000:]
        for line in out.strip().splitlines():
            record = json.loads(line)
            by_scenario[record.pop("scenario")].append(record)
    return by_scenario


@pytest.mark.parametrize(("mode", "sync_every"), [("batch", 4), ("batch", 16), ("loss", 4)])
def test_poison_on_rank_one_halts_both_ranks_at_that_step(results, mode, sync_every):
    zero, one = results[f"{mode}:{sync_every}"]
    assert (zero["rank"], one["rank"]) == (0, 1)
    for rank in (zero, one):
        assert rank.get("step") == BAD, rank
        match = MESSAGE_PATTERN.fullmatch(rank["message"])
        assert match is not None and match.group(1) == str(BAD)
        assert rank["params_equal_last_good"], rank  # no update landed from BAD on
        assert rank["steps_taken"] == min(sync_every, 8)  # halted at the sync point (or close)
    assert zero["message"] == one["message"]  # the same error, word for word
    if mode == "loss":  # rank 0's own loss and gradients were finite
        assert zero["loss"] == "nan" and zero["grad_norm"] != "nan"


def test_clean_run_on_two_ranks_finishes(results):
    zero, one = results["clean:4"]
    assert zero == {"rank": 0, "finished": 8} and one == {"rank": 1, "finished": 8}


def test_a_killed_rank_makes_the_other_exit_non_zero_within_60_s():
    zero, one = _start("kill:4")
    try:
        one.wait(timeout=RUN_LIMIT)
    except subprocess.TimeoutExpired:
        zero.kill(), one.kill()
        pytest.fail("rank 1 did not reach its SIGKILL")
    killed_at = time.monotonic()
    assert one.returncode == -signal.SIGKILL
    ((code, out, err),) = _finish([zero], 60)
    assert time.monotonic() - killed_at < 60
    assert code != 0, out
    assert "finished" not in out and "step" not in out
    assert "gloo" in err or "Connection" in err or "timed out" in err, err[-2000:]
