"""A model's output computed in one method, stored under a key of a batch or rollout
dict, and read back by that key where the loss is computed: cleaning it where it is
computed hides a NaN the model produced (GRPO's and PPO's old log-probs, computed
without gradient when the rollout is made and read by ``compute_loss``; a JAX rollout's
values read by the loss function). Stored under a key that only a log, an evaluation or
nothing reads, it stays clean."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

# TRL/axolotl: old log-probs made with the rollout, read back in compute_loss
TORCH_ROLLOUT = """\
import torch

class GRPOTrainer:
    def _old_logps(self, model, input_ids):
        logits = model(input_ids=input_ids).logits
        logits = torch.nan_to_num(logits, nan=0.0)
        return torch.log_softmax(logits, dim=-1)

    def _generate_and_score(self, inputs):
        data = {"ids": inputs["ids"]}
        with torch.no_grad():
            old_logps = self._old_logps(self.model, inputs["ids"])
        data["old_per_token_logps"] = old_logps
        return data

    def compute_loss(self, model, inputs):
        logps = torch.log_softmax(model(inputs["ids"]).logits, dim=-1)
        old_logps = inputs.get("old_per_token_logps")
        ratio = torch.exp(logps - old_logps)
        per_token_loss = -ratio * inputs["advantages"]
        loss = per_token_loss.mean()
        return loss
"""

# Lightning PPO: the stored values are read by subscript in training_step
LIGHTNING_PPO = """\
import torch

class PPO(LightningModule):
    def values_of(self, obs):
        values = self.critic(obs)
        values[torch.isnan(values)] = 0.0
        return values

    def collect(self, obs):
        batch = {}
        batch["old_values"] = self.values_of(obs).detach()
        return batch

    def training_step(self, batch, batch_idx):
        old_values = batch["old_values"]
        values = self.critic(batch["obs"])
        value_loss = ((values - old_values) ** 2).mean()
        return value_loss
"""

# JAX: a rollout dict built from a jitted forward, read by the loss function
JAX_ROLLOUT = """\
import jax
import jax.numpy as jnp

def policy_logprobs(params, apply_fn, obs, actions):
    logits = apply_fn(params, obs)
    logits = jnp.nan_to_num(logits)
    return jnp.take_along_axis(jax.nn.log_softmax(logits), actions[..., None], -1)

def rollout(params, apply_fn, obs, actions):
    return {"obs": obs, "actions": actions,
            "old_logp": policy_logprobs(params, apply_fn, obs, actions)}

def update(state, apply_fn, batch):
    def loss_fn(params):
        logp = jax.nn.log_softmax(apply_fn(params, batch["obs"]))
        old_logp = batch["old_logp"]
        loss = -(jnp.exp(logp - old_logp) * batch["adv"]).mean()
        return loss
    grads = jax.grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads)
"""

# look-alikes: the key is read only by a log, or by nothing, or by an evaluation loop
LOGGED_ONLY = """\
import torch

class Trainer:
    def _logps(self, model, input_ids):
        logits = model(input_ids=input_ids).logits
        logits = torch.nan_to_num(logits, nan=0.0)
        return torch.log_softmax(logits, dim=-1)

    def _generate(self, inputs):
        data = {}
        with torch.no_grad():
            data["ref_logps"] = self._logps(self.ref_model, inputs["ids"])
        return data

    def compute_loss(self, model, inputs):
        loss = model(inputs["ids"]).loss
        self.log({"ref_logps": inputs["ref_logps"].mean().item()})
        return loss
"""

EVALUATED_ONLY = """\
import torch

class Trainer:
    def _logps(self, model, input_ids):
        logits = model(input_ids=input_ids).logits
        logits = torch.nan_to_num(logits, nan=0.0)
        return torch.log_softmax(logits, dim=-1)

    def _prepare(self, inputs):
        return {"eval_logps": self._logps(self.model, inputs["ids"])}

    def evaluate(self, inputs):
        eval_loss = -inputs["eval_logps"].mean()
        return eval_loss

    def compute_loss(self, model, inputs):
        return model(inputs["ids"]).loss
"""

OTHER_KEY = """\
import torch

class Trainer:
    def _logps(self, model, input_ids):
        logits = model(input_ids=input_ids).logits
        logits = torch.nan_to_num(logits, nan=0.0)
        return torch.log_softmax(logits, dim=-1)

    def _generate(self, inputs):
        data = {"ids": inputs["ids"]}
        data["shown_logps"] = self._logps(self.model, inputs["ids"])
        return data

    def compute_loss(self, model, inputs):
        logps = model(inputs["ids"]).logits.log_softmax(-1)
        loss = -(logps * inputs["advantages"]).mean()
        return loss
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    ("source", "line"),
    [(TORCH_ROLLOUT, 6), (LIGHTNING_PPO, 6), (JAX_ROLLOUT, 6)],
    ids=["torch-grpo", "lightning-ppo", "jax"],
)
def test_cleaning_a_value_the_loss_reads_back_by_key_is_found(source: str, line: int) -> None:
    assert [hit for hit, _ in findings(source)] == [line]


@pytest.mark.parametrize(
    "source",
    [LOGGED_ONLY, EVALUATED_ONLY, OTHER_KEY],
    ids=["logged", "evaluated", "other-key"],
)
def test_a_value_stored_under_a_key_no_loss_reads_stays_clean(source: str) -> None:
    assert findings(source) == []


# axolotl's padding-free scoring: log-probs written chunk by chunk into a preallocated
# buffer, which is returned and stored under the key the loss reads
BUFFER_FILLED = """\
import torch

class GRPOTrainer:
    def _logps_flattened(self, model, input_ids, chunk):
        all_logps = torch.zeros(input_ids.shape)
        for start in range(0, input_ids.shape[0], chunk):
            logits = model(input_ids=input_ids[start:start + chunk]).logits
            logits = torch.nan_to_num(logits, nan=0.0)
            all_logps[start:start + chunk] = torch.log_softmax(logits, dim=-1)
        return all_logps

    def _generate_and_score(self, inputs):
        data = {}
        with torch.no_grad():
            old_logps = self._logps_flattened(self.model, inputs["ids"], 4)
        data["old_per_token_logps"] = old_logps
        return data

    def compute_loss(self, model, inputs):
        logps = torch.log_softmax(model(inputs["ids"]).logits, dim=-1)
        old_logps = inputs.get("old_per_token_logps")
        loss = -(torch.exp(logps - old_logps) * inputs["advantages"]).mean()
        return loss
"""

# the same buffer, filled with values that are only shown
BUFFER_SHOWN = BUFFER_FILLED.replace(
    'data["old_per_token_logps"] = old_logps', 'data["shown_logps"] = old_logps'
)


def test_cleaning_a_value_written_into_a_buffer_the_loss_reads_is_found() -> None:
    assert findings(BUFFER_FILLED) == [(8, "NZ101")]


def test_a_buffer_no_loss_reads_stays_clean() -> None:
    assert findings(BUFFER_SHOWN) == []
