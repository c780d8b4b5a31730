"""A tiny regression loop the torch guard's tests poison at chosen steps."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd-forloop": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
    "sgd-foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    "sgd-fused": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True),
    "adam-forloop": lambda p: torch.optim.Adam(p, lr=0.01, foreach=False),
    "adam-foreach": lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    "adam-fused": lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
    "adamw-forloop": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=False),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
    "adamw-fused": lambda p: torch.optim.AdamW(p, lr=0.01, fused=True),
}


def model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def batch(step: int, poison: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(16, 4, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    if poison:
        x[0, 0] = float("nan")
    return x, y


def loss_of(net: torch.nn.Module, data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = data
    return torch.nn.functional.mse_loss(net(x), y)


def snapshot(net: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Deep copies of the model's and the optimizer's state dicts."""
    return {
        "model": copy.deepcopy(net.state_dict()),
        "optimizer": copy.deepcopy(opt.state_dict()),
    }


def assert_state_equal(net: torch.nn.Module, opt: torch.optim.Optimizer, saved: dict) -> None:
    """Parameters and every optimizer state tensor bit-equal to ``saved``."""
    live = net.state_dict()
    assert live.keys() == saved["model"].keys()
    for name, value in live.items():
        assert torch.equal(value, saved["model"][name]), name
    state = opt.state_dict()["state"]
    old = saved["optimizer"]["state"]
    assert state.keys() == old.keys()
    for index, entries in state.items():
        assert entries.keys() == old[index].keys()
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, old[index][key]), (index, key)
            else:
                assert value == old[index][key], (index, key)
