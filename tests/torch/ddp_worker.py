"""One rank of a two-process DDP run on CPU (gloo), started with torchrun-style env vars.

``python ddp_worker.py MODE:SYNC_EVERY ...``; RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT come from the environment. Each scenario trains a fresh model in the same
process group and prints one JSON line: the halt this rank saw (step, message, whether its
parameters still equal those after the last good step), or that it finished.

MODE: ``batch`` (rank 1's batch at BAD holds a NaN), ``loss`` (rank 1's loss at BAD is
NaN while its gradients stay finite: only the ranks' agreement can halt rank 0), ``kill``
(rank 1 SIGKILLs itself at BAD: rank 0 must fail, not hang), ``clean``.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from nozero.torch import Guard, GuardHalt

BAD = 2
STEPS = 8
# Collectives give up after this long; a dead peer is usually seen at once (its socket
# closes), the timeout bounds the rest, well inside the tests' 60 s.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=20)


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def scenario(mode: str, sync_every: int) -> dict[str, object]:
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on both ranks
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model = DistributedDataParallel(net)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    last_good: list[torch.Tensor] = []
    result: dict[str, object] = {"rank": rank}
    try:
        with Guard(optimizer, sync_every=sync_every, model=model) as guard:
            for step in range(STEPS):
                x = torch.randn(16, 4, generator=data)
                y = torch.randn(16, 1, generator=data)
                poisoned = rank == 1 and step == BAD
                if step == BAD:
                    last_good = _params(model)
                if poisoned and mode == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if poisoned and mode == "batch":
                    x[3, 1] = float("nan")
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                seen = loss + float("nan") if poisoned and mode == "loss" else loss
                guard.step(seen, batch=x)
                optimizer.zero_grad()
        result["finished"] = guard.steps
    except GuardHalt as halt:
        result.update(
            step=halt.step,
            message=str(halt),
            loss=repr(halt.loss),
            grad_norm=repr(halt.grad_norm),
            steps_taken=guard.steps,
            params_equal_last_good=all(
                torch.equal(p, q) for p, q in zip(_params(model), last_good, strict=True)
            ),
        )
    return result


def main(scenarios: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=COLLECTIVE_TIMEOUT)
    for name in scenarios:
        mode, sync_every = name.split(":")
        result = scenario(mode, int(sync_every))
        print(json.dumps({"scenario": name, **result}), flush=True)
    # Both ranks leave together; then skip interpreter teardown, where torch's gloo threads
    # sometimes abort ("terminate called without an active exception", seen in CI) after
    # everything this worker reports is printed.
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
