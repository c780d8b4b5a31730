"""One rank of a two-process FSDP2 run on CPU (gloo) under the guard; writes what it saw.

Run as ``python fsdp_worker.py RANK WORLD PORT OUT_DIR``. Rank 1 poisons one element of
its gradient shard at step ``BAD``: only that rank sees it, so the ranks halt together
only if they agree on the device.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from nozero.torch import Guard, GuardHalt

BAD = 5


def main(rank: int, world: int, port: int, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    fully_shard(net, mesh=init_device_mesh("cpu", (world,)))
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
                next(iter(net.parameters())).grad.to_local()[0, 0] = float("inf")
            guard.step(loss)
            opt.zero_grad()
            if step == BAD - 1:
                shards = [p.to_local().detach().clone() for p in net.parameters()]
        guard.close()
    except GuardHalt as err:
        report["message"] = str(err)
        report["step"] = err.step
        report["last_good"] = all(
            torch.equal(a, p.to_local()) for a, p in zip(shards, net.parameters(), strict=True)
        )
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
