"""A running statistic the object keeps is no live training signal, whatever its name.

Gaussian splatting averages each point's gradient norm over its visits
(``grads = self.xyz_gradient_accum / self.denom``) and sets the 0/0 of points never
visited to 0 before picking points to split: one buffer divided by another, recorded by
the object. Gradients read from the model and cleaned the same way stay a finding.
"""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

DENSIFY = """\
import torch


class GaussianModel:
    def densify_and_prune(self, max_grad, extent):
        grads = RATIO
        grads[grads.isnan()] = 0.0
        self.densify_and_clone(grads, max_grad, extent)
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "model.py")]


@pytest.mark.parametrize(
    "ratio",
    ["self.xyz_gradient_accum / self.denom", "self.grad_accum[mask] / self.denom[mask]"],
)
def test_a_mean_of_kept_buffers_is_a_statistic(ratio: str) -> None:
    assert findings(DENSIFY.replace("RATIO", ratio)) == []


@pytest.mark.parametrize(
    "ratio",
    ["self.model.weight.grad / self.denom", "torch.stack([p.grad for p in self.params]) / n"],
)
def test_gradients_read_from_the_model_are_still_signal(ratio: str) -> None:
    assert findings(DENSIFY.replace("RATIO", ratio)) == [(7, "NZ105")]
