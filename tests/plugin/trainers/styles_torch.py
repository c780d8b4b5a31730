"""PyTorch trainers in styles the recipes do not show, written as their users write them.

A Lightning Fabric loop (``fabric.setup``, ``fabric.backward``, ``fabric.clip_gradients``)
under ``nozero.torch.Guard``: as Fabric's users write it, ``clip_gradients`` raises its
own error on a non-finite norm (the loop that passes is the troubleshooting page's Fabric
recipe). Copied into ``pytester`` directories and imported there by name, in a
subprocess: torch must not load twice in one process.
"""

from __future__ import annotations

import numpy as np
import torch
from lightning_fabric import Fabric

from nozero.testing import TrainerUnderTest
from nozero.torch import Guard


def example() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((8, 4)).astype(np.float32),
        "y": rng.standard_normal((8, 1)).astype(np.float32),
    }


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))


def _fabric_train(batches):
    fabric = Fabric(accelerator="cpu", devices=1)
    model = _mlp()
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    history = []
    with Guard(optimizer, sync_every=16) as guard:
        for batch in batches:
            x, y = torch.from_numpy(batch["x"]), torch.from_numpy(batch["y"])
            loss = torch.nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            norm = fabric.clip_gradients(model, optimizer, max_norm=1.0)  # raises if not finite
            guard.step(loss, grad_norm=norm)
            optimizer.zero_grad()
            history.append((loss.detach(), norm))
    return history


def fabric_default() -> TrainerUnderTest:
    return TrainerUnderTest.from_example(example(), _fabric_train)
