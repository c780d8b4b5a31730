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


def has_dtensors(optimizer: torch.optim.Optimizer) -> bool:
    """Whether any parameter is a DTensor (FSDP2, tensor parallel), whose local shard counts."""
    return any(
        callable(getattr(p, "to_local", None)) for g in optimizer.param_groups for p in g["params"]
    )


def grads(optimizer: torch.optim.Optimizer, dtensors: bool = True) -> list[torch.Tensor]:
    """The local gradients the optimizer is about to apply.

    ``dtensors=False`` (no parameter is a DTensor) skips looking for local shards.
    """
    if not dtensors:
        return [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                out.append(_local(p.grad)[0])
    return out


def norms(tensors: list[torch.Tensor], device: torch.device | None) -> list[torch.Tensor]:
    """Each tensor's 2-norm, float32 whatever the gradients' dtype: one kernel.

    The norms are moved to ``device``; ``None`` when every tensor is known to be there.
    """
    if not tensors:
        return []
    if all(t.dtype == torch.float32 for t in tensors):
        out = list(torch._foreach_norm(tensors, 2))
    else:
        out = list(torch._foreach_norm(tensors, 2, dtype=torch.float32))
    if device is not None and any(n.device != device for n in out):
        out = [n.to(device, non_blocking=True) for n in out]
    return out


def global_norm(norms: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The norm of per-tensor ``norms`` (or of one global norm): float32, 0-dim."""
    if not norms:
        return torch.zeros((), dtype=torch.float32, device=device)
    if len(norms) == 1:
        return norms[0]
    return torch.linalg.vector_norm(torch.stack(norms))


def as_global(grad_norm: torch.Tensor | float, device: torch.device) -> torch.Tensor:
    """A norm the loop computed (``clip_grad_norm_``'s return) as a float32 0-dim tensor."""
    if not isinstance(grad_norm, torch.Tensor):
        return torch.tensor(float(grad_norm), dtype=torch.float32, device=device)
    full = getattr(grad_norm, "full_tensor", None)  # a DTensor (FSDP2's clip)
    value = full() if callable(full) else grad_norm
    if value.dim() == 0 and value.dtype == torch.float32 and value.device == device:
        return value  # read under no_grad at the step: no conversion kernel needed
    return value.detach().reshape(()).to(device=device, dtype=torch.float32, non_blocking=True)


@torch.no_grad()
def clip(tensors: list[torch.Tensor], max_norm: float, norm: torch.Tensor) -> None:
    """Scale ``tensors`` in place so their global norm ``norm`` is at most ``max_norm``.

    As ``clip_grad_norm_`` does, without computing the norm again and without a host
    read (the coefficient stays on the device).
    """
    if not tensors:
        return
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    torch._foreach_mul_(tensors, coef)
