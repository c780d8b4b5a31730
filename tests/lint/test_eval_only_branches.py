"""A value cleaned only when the module is not training (``if not self.training:``, the
``else`` of ``if self.training:``, flax's ``if not train:``) is shown or evaluated, never
trained on: no finding there. The same cleaning on the training side is found."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

TEMPLATE = """\
import torch
import torch.nn.functional as F

class Classifier(torch.nn.Module):
    def forward(self, x, labels):
        logits = self.head(x)
        loss = F.cross_entropy(logits, labels)
        {test}
            loss = torch.nan_to_num(loss)
        {other}
        return loss
"""

FLAX_TEMPLATE = """\
import jax.numpy as jnp
import optax

def loss_fn(params, batch, train):
    logits = model_apply(params, batch["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()
    {test}
        loss = jnp.nan_to_num(loss)
    return loss
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "model.py")]


def torch_case(test: str, other: str = "") -> str:
    return TEMPLATE.format(test=test, other=other)


@pytest.mark.parametrize(
    "source",
    [
        torch_case("if not self.training:"),
        torch_case("if self.training is False:"),
        torch_case("if self.training:\n            pass\n        else:"),
        FLAX_TEMPLATE.format(test="if not train:"),
    ],
    ids=["not-training", "training-is-false", "else-of-training", "flax-not-train"],
)
def test_cleaning_only_when_not_training_is_no_finding(source: str) -> None:
    assert findings(source) == []


@pytest.mark.parametrize(
    "source",
    [torch_case("if self.training:"), FLAX_TEMPLATE.format(test="if train:")],
    ids=["training", "flax-train"],
)
def test_cleaning_while_training_is_found(source: str) -> None:
    assert [code for _, code in findings(source)] == ["NZ101"]
