"""A function whose result a training caller in the same file computes its loss from is a
part of the loss: cleaning the model's output inside it hides a NaN the model produced
(GRPO's and DPO's per-token log-probs, computed in one method and used in
``compute_loss``; a JAX or Keras forward helper). The same helper used only to evaluate,
to sample or by nothing is left alone."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

TORCH_LOGPS = """\
import torch

class GRPOTrainer:
    def _get_per_token_logps(self, model, input_ids, completion_ids):
        logits = model(input_ids=input_ids).logits
        logits = torch.nan_to_num(logits, nan=0.0)
        return selective_log_softmax(logits, completion_ids)

    def compute_loss(self, model, inputs):
        per_token_logps = self._get_per_token_logps(model, inputs["ids"], inputs["completion"])
        ratio = torch.exp(per_token_logps - inputs["old_per_token_logps"])
        per_token_loss = -ratio * inputs["advantages"]
        loss = per_token_loss.mean()
        return loss
"""

# the log-probs gathered chunk by chunk into a list, as a memory-bound trainer does
TORCH_CHUNKS = """\
import torch

class Trainer:
    def _logps(self, model, input_ids):
        chunks = []
        for ids in input_ids.split(4):
            logits = model(ids).logits
            logits[torch.isnan(logits)] = 0.0
            chunks.append(torch.log_softmax(logits, dim=-1))
        return torch.cat(chunks)

    def training_step(self, batch):
        logps = self._logps(self.model, batch["input_ids"])
        loss = -(logps * batch["rewards"]).mean()
        self.manual_backward(loss)
"""

JAX_FORWARD = """\
import jax.numpy as jnp
import optax

def compute_logits(state, params, batch):
    logits = state.apply_fn({"params": params}, batch["x"])
    return jnp.nan_to_num(logits)

def train_step(state, batch):
    def loss_fn(params):
        logits = compute_logits(state, params, batch)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()
        return loss
    grads = jax.grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads)
"""

KERAS_FORWARD = """\
import tensorflow as tf

def forward(model, x):
    logits = model(x, training=True)
    return tf.where(tf.math.is_nan(logits), tf.zeros_like(logits), logits)

def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        logits = forward(model, x)
        loss = loss_object(y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""

# the same helper, read only by an evaluation loop
EVALUATION_ONLY = """\
import torch

def predict(model, x):
    logits = model(x)
    return torch.nan_to_num(logits)

def evaluate(model, loader, criterion):
    total = 0.0
    for x, y in loader:
        total += criterion(predict(model, x), y).item()
    return total
"""

# the same helper, read only to sample the next token
SAMPLING_ONLY = """\
import torch

def next_token_logits(model, ids):
    logits = model(ids).logits[:, -1]
    return torch.nan_to_num(logits, nan=-1e4)

def sample(model, ids, steps):
    for _ in range(steps):
        probs = torch.softmax(next_token_logits(model, ids), dim=-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)
    return ids
"""

# the loss is computed from another helper's result; this one only feeds a plot
OTHER_HELPER = """\
import torch

def shown(model, x):
    return torch.nan_to_num(model(x))

def logits_of(model, x):
    return model(x)

def training_step(model, x, y):
    loss = torch.nn.functional.cross_entropy(logits_of(model, x), y)
    loss.backward()
    plot(shown(model, x))
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    ("source", "line"),
    [(TORCH_LOGPS, 6), (TORCH_CHUNKS, 8), (JAX_FORWARD, 6), (KERAS_FORWARD, 5)],
    ids=["torch-grpo", "torch-chunks", "jax", "keras"],
)
def test_cleaning_in_a_helper_the_loss_is_computed_from_is_found(source: str, line: int) -> None:
    assert [hit for hit, _ in findings(source)] == [line]


@pytest.mark.parametrize(
    "source",
    [EVALUATION_ONLY, SAMPLING_ONLY, OTHER_HELPER],
    ids=["evaluation", "sampling", "other-helper"],
)
def test_a_helper_no_training_loss_reads_stays_clean(source: str) -> None:
    assert findings(source) == []
