"""Part of a gradient set to zero on a non-finite test (one example's row,
``z.grad[i] = zeros_like(z.grad[i])``, or every element, ``p.grad[...] = 0``) is a
zeroing, reported as one; zeroing the rows of frozen embeddings, with no finiteness test
around it, is ordinary training code."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

ROW_OF_AN_INPUT_GRADIENT = """\
import torch as th

def refine(inputs, loss, optimizer):
    loss.backward()
    for z in inputs:
        for i in range(len(z)):
            if not th.all(th.isfinite(z.grad[i])):
                z.grad[i] = th.zeros_like(z.grad[i])
    optimizer.step()
"""

EVERY_ELEMENT = """\
import torch

def train_step(model, loss, optimizer):
    loss.backward()
    for p in model.parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            p.grad[...] = 0.0
    optimizer.step()
"""

FROZEN_ROWS = """\
import torch

def train_step(model, loss, optimizer, n_frozen):
    loss.backward()
    model.embed.weight.grad[:n_frozen] = 0
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
    optimizer.step()
"""


def findings(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    ("source", "line"),
    [(ROW_OF_AN_INPUT_GRADIENT, 8), (EVERY_ELEMENT, 7)],
    ids=["one-example-row", "every-element"],
)
def test_part_of_a_gradient_zeroed_on_a_nonfinite_test_is_a_zeroing(source, line) -> None:
    ((found_line, code, message),) = findings(source)
    assert (found_line, code) == (line, "NZ201")
    assert "the gradients are zeroed here" in message


def test_frozen_rows_zeroed_without_a_test_stay_clean() -> None:
    assert findings(FROZEN_ROWS) == []
