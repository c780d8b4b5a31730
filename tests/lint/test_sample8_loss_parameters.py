"""A loss function computes its loss from the model's output. Where none of its
parameters is named for that output (``logits``, ``y_pred``), those that name no label,
mask, weight, size, setting or batch of data hold it (sample-factory's
``_symmetric_kl_exploration_loss(action_distribution, valids, ...)``, acme's R2D2 loss
from ``qs``): a non-finite value computed from them and replaced on the way to the
returned loss is found. A loss function's weights made from the batch, a label cleaned
beside a named prediction, and a statistics library's ``entropy`` (named with a loss
word, not called a loss) stay clean."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

TORCH_EXPLORATION_LOSS = """\
import torch

class Learner:
    def _symmetric_kl_exploration_loss(self, action_distribution, valids, num_invalids):
        kl_prior = action_distribution.symmetric_kl_with_uniform_prior()
        kl_prior = masked_select(kl_prior, valids, num_invalids).mean()
        if not torch.isfinite(kl_prior):
            kl_prior = torch.zeros(kl_prior.shape)
        kl_prior_loss = self.cfg.exploration_loss_coeff * kl_prior
        return kl_prior_loss
"""

TF_TD_LOSS = """\
import tensorflow as tf

def transformed_n_step_loss(qs, targnet_qs, actions, rewards):
    target = tf.stop_gradient(rewards[1:] + tf.reduce_max(targnet_qs[1:], -1))
    finite_mask = tf.math.is_finite(target)
    target = tf.where(finite_mask, target, tf.zeros_like(target))
    errors = tf.gather(qs[:-1], actions[:-1], batch_dims=2) - target
    errors = tf.where(finite_mask, errors, tf.zeros_like(errors))
    loss = 0.5 * tf.reduce_sum(tf.square(errors), axis=0)
    return loss
"""

JAX_KL_LOSS = """\
import jax.numpy as jnp

def kl_loss(mu, logvar):
    kl = -0.5 * (1 + logvar - mu**2 - jnp.exp(logvar))
    kl = jnp.where(jnp.isfinite(kl), kl, 0.0)
    return kl.mean()
"""

# t5x: the loss weights of an empty segment (0/0) set to 0, made from the batch
WEIGHTS_FROM_THE_BATCH = """\
import jax.numpy as jnp

def get_loss_normalizing_factor_and_weights(loss_normalizing_factor, batch):
    loss_weights = batch["decoder_loss_weights"]
    norm_vec = jnp.sum(loss_weights, axis=-1, keepdims=True)
    loss_weights = jnp.nan_to_num(loss_weights / norm_vec, nan=0, posinf=0, neginf=0)
    return loss_normalizing_factor, loss_weights
"""

# the prediction is named: the label's NaN (a missing value) is masked, not hidden
LABEL_BESIDE_A_NAMED_PREDICTION = """\
import torch

def masked_mse_loss(y_pred, y_true):
    known = torch.isfinite(y_true)
    y_true = torch.where(known, y_true, torch.zeros_like(y_true))
    return ((y_pred - y_true) ** 2 * known).sum() / known.sum()
"""

# a statistics library: ``entropy`` is a loss word, but the function is plain maths
STATS_ENTROPY = """\
import jax.numpy as jnp

def entropy(mu, loc=0):
    k = jnp.arange(35)[:, None] - loc
    probs = jnp.exp(k * jnp.log(mu) - mu - gammaln(k + 1))
    probs = jnp.where(jnp.isnan(probs), 0.0, probs)
    return -jnp.sum(probs * jnp.log(probs), axis=0)
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "losses.py")]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (TORCH_EXPLORATION_LOSS, [(8, "NZ106")]),
        (TF_TD_LOSS, [(6, "NZ103"), (8, "NZ103")]),
        (JAX_KL_LOSS, [(5, "NZ103")]),
    ],
    ids=["torch-exploration", "tf-td-errors", "jax-kl"],
)
def test_a_value_from_an_unnamed_prediction_is_training_signal(
    source: str, expected: list[tuple[int, str]]
) -> None:
    assert findings(source) == expected


@pytest.mark.parametrize(
    "source",
    [WEIGHTS_FROM_THE_BATCH, LABEL_BESIDE_A_NAMED_PREDICTION, STATS_ENTROPY],
    ids=["weights-from-batch", "label-beside-named-prediction", "stats-entropy"],
)
def test_weights_and_labels_stay_clean(source: str) -> None:
    assert findings(source) == []
