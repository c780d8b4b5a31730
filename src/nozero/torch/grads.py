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


def norm(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The 2-norm of all of ``tensors`` together: a float32 0-dim tensor on ``device``.

    One ``_foreach_norm`` (float32 per tensor, whatever the gradients' dtype) and one norm
    of the stacked norms: three kernels whatever the number of tensors.
    """
    if not tensors:
        return torch.zeros((), dtype=torch.float32, device=device)
    norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)
    if any(n.device != device for n in norms):
        norms = [n.to(device, non_blocking=True) for n in norms]
    return torch.linalg.vector_norm(torch.stack(norms))
