"""Two shapes of training code read to the end:

- a training loop's parameter that gates cleaning the gradients, true by default
  (``force_finite=True``), turns the cleaning on for every caller that leaves it out:
  the default is a finding, with the route to the cleaning; false by default, it is not;
- a loss module that builds a list by ``append`` from the model's outputs and stacks it
  computes its loss from what it appended: cleaning the stacked values is NZ101.
"""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

from .conftest import write_project

TRAINING_LOOP = """\
import torch


def training_loop(net, loader, optimizer, force_finite=True, lr=1e-3):
    for x, y in loader:
        loss = net.loss(x, y)
        loss.backward()
        if force_finite:
            for param in net.parameters():
                if param.grad is not None:
                    torch.nan_to_num(param.grad, nan=0, out=param.grad)
        optimizer.step()
"""

BUILT_LIST_LOSS = """\
import torch
from torch import nn


class KernelLoss(nn.Module):
    def __init__(self, dim, temperature):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.temperature = temperature

    def forward(self, image_emb, compound_emb):
        z1 = self.proj(compound_emb)
        kernel = []
        for a in z1:
            for b in image_emb:
                kernel.append(torch.dist(a, b))
        kernel = torch.stack(kernel).view(len(z1), len(image_emb))
        sim = torch.nan_to_num(torch.exp(-kernel / self.temperature))
        pos = torch.diagonal(sim)
        loss = -torch.log(pos / (sim.sum(dim=1) - pos)).mean()
        return loss
"""


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        ("True", ["loop.py:4:56: NZ106", "loop.py:11:21: NZ101"]),
        ("False", ["loop.py:11:21: NZ101"]),
    ],
    ids=["on-by-default", "off-by-default"],
)
def test_a_switch_true_by_default_is_turned_on_by_its_default(
    lint, tmp_path, default, expected
) -> None:
    source = TRAINING_LOOP.replace("force_finite=True", f"force_finite={default}")
    write_project(tmp_path / "project", {"loop.py": source})
    result = lint("project", "--no-cache")
    assert result.code == 1, result.err
    found = [
        line.split(" ", 2)[0] + " " + line.split(" ", 2)[1] for line in result.out.splitlines()
    ]
    assert [f.removeprefix("project/") for f in found if " NZ" in f] == expected
    if default == "True":
        assert "force_finite turned on here" in result.out
        assert "replaced at loop.py:11" in result.out


def test_cleaning_values_stacked_from_appended_model_outputs_is_found() -> None:
    found = [(f.line, f.code) for f in lint_source(textwrap.dedent(BUILT_LIST_LOSS), "loss.py")]
    assert found == [(18, "NZ101")]
