"""The global gradient norm of an optimizer's parameters, computed on the device."""

from __future__ import annotations

import torch


def _local(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """A gradient's local shard and whether it is sharded across ranks."""
    to_local = getattr(t, "to_local", None)
    if callable(to_local):  # a DTensor (FSDP2): sharded unless every placement replicates
        placements = getattr(t, "placements", ())
        sharded = any(not p.is_replicate() for p in placements)
        return to_local(), sharded
    return t, False


def is_sharded(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer's parameters are shards (FSDP's flat or DTensor parameters)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if getattr(p, "_is_flat_param", False) or getattr(p, "_fsdp_flattened", False):
                return True
            if _local(p)[1]:
                return True
    return False


def grads(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The local gradients the optimizer is about to apply."""
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                out.append(_local(p.grad)[0])
    return out


def sum_of_squares(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Sum of squared elements of ``tensors`` as a float64 0-dim tensor on ``device``."""
    if not tensors:
        return torch.zeros((), dtype=torch.float64, device=device)
    norms = torch._foreach_norm(tensors, 2.0)
    stacked = torch.stack([n.to(device=device, dtype=torch.float64) for n in norms])
    return stacked.square().sum()
