"""Two shapes from the seventh held-out sample (nerfstudio):

- A model's forward method (``forward``, ``call``, ``__call__``, ``get_outputs``) stores
  its outputs under keys, and the loss method reads one of them: a value cleaned on the
  way to that key is training signal, though the parts that made it (``self.field``,
  ``self.renderer_rgb``) have no model word in their names. Cleaned for display in the
  metrics method, or cleaned as the input, it stays clean.
- What a function named for a loss returns is its loss: ``return torch.nanmean(diff)``
  there drops NaN terms from the loss (NZ107), whatever the terms are named. A metric's
  ``nanmean``, or NumPy's, stays clean."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

NERF_OUTPUTS = """\
import torch

class NerfModel(Model):
    def get_outputs(self, ray_bundle):
        field_outputs = self.field(ray_bundle)
        accumulation = self.renderer_accumulation(field_outputs)
        rgb = self.renderer_rgb(field_outputs)
        accum_mask = torch.clamp(torch.nan_to_num(accumulation, nan=0.0), min=0.0, max=1.0)
        outputs = {"rgb": rgb}
        outputs["train_output"] = accum_mask * rgb
        return outputs

    def get_loss_dict(self, outputs, batch):
        train_output = outputs["train_output"].view(1, -1, 3)
        sds_loss = self.guide.sds_loss(batch["text"], train_output)
        return {"sds_loss": sds_loss}
"""

FLAX_OUTPUTS = """\
import jax.numpy as jnp
import flax.linen as nn

class Denoiser(nn.Module):
    def __call__(self, x):
        h = self.body(x)
        eps = jnp.nan_to_num(self.eps_head(h))
        return {"eps": eps, "features": h}

def loss_fn(params, state, batch):
    out = state.apply_fn(params, batch["noisy"])
    eps = out["eps"]
    loss = jnp.mean((eps - batch["noise"]) ** 2)
    return loss
"""

# the outputs cleaned for display, in the metrics method
METRICS_CLEAN_THEIR_COPY = """\
import torch

class NerfModel(Model):
    def get_outputs(self, ray_bundle):
        field_outputs = self.field(ray_bundle)
        rgb = self.renderer_rgb(field_outputs)
        accumulation = self.renderer_accumulation(field_outputs)
        return {"rgb": rgb, "accumulation": accumulation}

    def get_loss_dict(self, outputs, batch):
        rgb_loss = self.rgb_loss(batch["image"], outputs["rgb"])
        return {"rgb_loss": rgb_loss}

    def get_image_metrics_and_images(self, outputs, batch):
        acc = colormaps.apply_colormap(torch.nan_to_num(outputs["accumulation"]))
        return {"psnr": self.psnr(outputs["rgb"], batch["image"])}, {"acc": acc}
"""

# the input is cleaned before the model's parts see it
INPUT_CLEANED = """\
import torch

class Regressor(torch.nn.Module):
    def forward(self, features):
        features = torch.nan_to_num(features)
        return {"pred": self.head(self.body(features))}

    def training_step(self, batch, batch_idx):
        out = self(batch["x"])
        loss = torch.nn.functional.mse_loss(out["pred"], batch["y"])
        return loss
"""

LOSS_RETURNS_NANMEAN = """\
import torch

def depth_ranking_loss(rendered_depth, gt_depth):
    dpt_diff = gt_depth[::2] - gt_depth[1::2]
    out_diff = rendered_depth[::2] - rendered_depth[1::2] + 1e-4
    differing = torch.sign(dpt_diff) != torch.sign(out_diff)
    return torch.nanmean(out_diff[differing] * torch.sign(out_diff[differing]))
"""

JAX_LOSS_RETURNS_NANMEAN = """\
import jax.numpy as jnp

def pairwise_hinge_loss(scores, labels):
    margins = 1.0 - (scores[:, None] - scores[None, :]) * labels
    return jnp.nanmean(jnp.maximum(margins, 0.0))
"""

METRIC_RETURNS_NANMEAN = """\
import torch

def depth_error(rendered_depth, gt_depth):
    out_diff = (rendered_depth - gt_depth).abs()
    return torch.nanmean(out_diff)
"""

NUMPY_LOSS = """\
import numpy as np

def mape_loss(y, y_hat):
    return np.nanmean(np.abs((y - y_hat) / y))
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "model.py")]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (NERF_OUTPUTS, [(8, "NZ101")]),
        (FLAX_OUTPUTS, [(7, "NZ101")]),
        (LOSS_RETURNS_NANMEAN, [(7, "NZ107")]),
        (JAX_LOSS_RETURNS_NANMEAN, [(5, "NZ107")]),
    ],
    ids=["nerf-key", "flax-key", "torch-loss-nanmean", "jax-loss-nanmean"],
)
def test_found(source: str, expected: list[tuple[int, str]]) -> None:
    assert findings(source) == expected


@pytest.mark.parametrize(
    "source",
    [METRICS_CLEAN_THEIR_COPY, INPUT_CLEANED, METRIC_RETURNS_NANMEAN, NUMPY_LOSS],
    ids=["metrics-copy", "input-cleaned", "metric-nanmean", "numpy-loss"],
)
def test_clean(source: str) -> None:
    assert findings(source) == []
