"""Ranks agree on every step's verdict: one asynchronous all-reduce per step, on the device.

Each rank contributes ``[bad, loss, grad sum of squares]``; the sum gives every rank the
same answer: a step is bad when any rank saw it bad (the count is turned into a 0/1
flag, so the fused kernels' ``found_inf`` is still exactly 1.0: the MAX of the flags, in
the same collective as the sums), the loss is the mean over ranks, and sharded gradients
(FSDP) give the global norm as the root of the summed squares. DDP's gradients are
already averaged and equal on every rank, so their local norm is the global one.
"""

from __future__ import annotations

import torch

try:
    import torch.distributed as dist
except ImportError:  # a build without distributed support
    dist = None  # type: ignore[assignment]


def resolve_group(group: object | None) -> object | None:
    """The group to reduce over: ``group``, else the default one when initialized."""
    if group is not None:
        return group
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return None


def world_size(group: object | None) -> int:
    if group is None or dist is None:
        return 1
    return dist.get_world_size(group)  # type: ignore[arg-type]


def agree(
    group: object | None,
    bad: torch.Tensor,
    loss: torch.Tensor,
    norm: torch.Tensor,
    sharded: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(bad, loss, grad norm)`` as all ranks of ``group`` agree (unchanged alone)."""
    size = world_size(group)
    if size == 1:
        return bad, loss, norm
    sumsq = norm.double().square() if sharded else torch.zeros_like(norm, dtype=torch.float64)
    vec = torch.stack([bad.double(), loss.double(), sumsq])
    work = dist.all_reduce(vec, op=dist.ReduceOp.SUM, group=group, async_op=True)  # type: ignore[arg-type]
    # On NCCL this orders the device stream after the collective without blocking the
    # host; gloo (CPU) completes it here.
    work.wait()
    return vec[0] > 0, vec[1] / size, vec[2].sqrt() if sharded else norm
