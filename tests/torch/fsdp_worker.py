"""One rank of a two-process FSDP run on CPU (gloo) under the guard; writes what it saw.

Run as ``python fsdp_worker.py RANK WORLD PORT OUT_DIR KIND``, KIND ``fsdp2``
(``fully_shard``, DTensor parameters) or ``fsdp1`` (``FullyShardedDataParallel``, one
flat parameter per rank). Rank 1 poisons one element of its gradient shard at step
``BAD``: only that rank sees it, so the ranks halt together only if they agree on the
device.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

from nozero.torch import Guard, GuardHalt

BAD = 5


def _shard(t: torch.Tensor) -> torch.Tensor:
    """This rank's part: a DTensor's local tensor (FSDP2), or the tensor (FSDP1's flat shard)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _wrap(net: torch.nn.Module, kind: str, world: int) -> torch.nn.Module:
    if kind == "fsdp1":
        return FullyShardedDataParallel(net, device_id=torch.device("cpu"))
    fully_shard(net, mesh=init_device_mesh("cpu", (world,)))
    return net


def main(rank: int, world: int, port: int, out: Path, kind: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    net = _wrap(net, kind, world)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, foreach=True)
    guard = Guard(opt, sync_every=4)
    report: dict = {"sharded": guard.sharded}
    shards: list[torch.Tensor] = []
    try:
        for step in range(12):
            gen = torch.Generator().manual_seed(100 * rank + step)
            x = torch.randn(8, 4, generator=gen)
            loss = net(x).pow(2).mean()
            loss.backward()
            if step == BAD and rank == 1:
                _shard(next(iter(net.parameters())).grad).view(-1)[0] = float("inf")
            guard.step(loss)
            opt.zero_grad()
            if step == BAD - 1:
                shards = [_shard(p).detach().clone() for p in net.parameters()]
        guard.close()
    except GuardHalt as err:
        report["message"] = str(err)
        report["step"] = err.step
        report["last_good"] = all(
            torch.equal(a, _shard(p)) for a, p in zip(shards, net.parameters(), strict=True)
        )
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    # Both ranks leave together; then skip interpreter teardown, where torch's FSDP1 and
    # gloo threads sometimes abort ("terminate called without an active exception", about
    # one run in eight here) after everything this worker reports is written.
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5])
