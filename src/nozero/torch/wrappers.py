"""Optimizers that frameworks wrap: the torch optimizer inside, and whether a step is one.

accelerate's ``AcceleratedOptimizer`` and Lightning's ``LightningOptimizer`` step an
inner ``torch.optim.Optimizer``; torch's step hooks, the state and the gradients live on
that inner one, so the guard hooks it and steps the wrapper (which may skip the step
under gradient accumulation, or step through its own loss scaler).
"""

from __future__ import annotations

from typing import Any

import torch

# The attribute each known wrapper keeps its inner optimizer in.
INNER_ATTRIBUTES = ("optimizer", "_optimizer")


def _is_hookable(optimizer: object) -> bool:
    """A torch optimizer whose ``step`` runs torch's step hooks (its ``__init__`` ran)."""
    return isinstance(optimizer, torch.optim.Optimizer) and hasattr(
        optimizer, "_optimizer_step_pre_hooks"
    )


def unwrap(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer that ``optimizer`` is or wraps; ``TypeError`` naming it if none."""
    seen = optimizer
    for _ in range(4):  # wrappers of wrappers, a few deep at most
        if _is_hookable(seen):
            return seen
        inner = next(
            (getattr(seen, a) for a in INNER_ATTRIBUTES if getattr(seen, a, None) is not None),
            None,
        )
        if inner is None:
            break
        seen = inner
    kind = type(optimizer).__name__
    raise TypeError(
        f"Guard needs a torch.optim.Optimizer (or a wrapper of one, such as accelerate's), "
        f"got {kind}"
    )


def will_step(stepper: Any) -> bool:
    """False when the wrapper will skip this ``step()`` call (accelerate, mid-accumulation)."""
    state = getattr(stepper, "gradient_state", None)
    return bool(getattr(state, "sync_gradients", True))


def own_scaler(stepper: Any) -> torch.amp.GradScaler | None:
    """The loss scaler a wrapper steps and updates itself, if any (accelerate's fp16)."""
    if _is_hookable(stepper):
        return None
    scaler = getattr(stepper, "scaler", None)
    return scaler if isinstance(scaler, torch.amp.GradScaler) else None
