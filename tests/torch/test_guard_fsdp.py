"""Sharded gradients (FSDP2 and FSDP1, two CPU processes): the ranks halt together."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard") or not torch.distributed.is_available():
    pytest.skip("needs torch.distributed with FSDP2", allow_module_level=True)

WORKER = Path(__file__).with_name("fsdp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("kind", ["fsdp2", "fsdp1"])
def test_fsdp_ranks_halt_at_the_same_step_with_the_last_good_shards(tmp_path, kind):
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), "2", str(port), str(tmp_path), kind],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=150)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], outputs
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(r["sharded"] for r in reports)
    assert [r["step"] for r in reports] == [5, 5]
    assert reports[0]["message"] == reports[1]["message"]
    assert "grad_norm=inf" in reports[0]["message"]
    assert all(r["last_good"] for r in reports)
