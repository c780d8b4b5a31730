"""A ``with no_grad():`` block observes only inside itself. A function whose one sign of
observing is such a block (an entropy or a statistic taken without gradient beside the
forward pass) still trains outside it: cleaning the logits a loss is computed from there
hides a NaN the model produced. Inside the block, under a ``no_grad`` decorator, with
``eval()``, or in a function named for evaluation, the function only observes."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

# GRPO's per-token log-probs with an entropy taken without gradient (TRL-style trainer)
TORCH_LOGPS = """\
import torch

class Trainer:
    def _get_per_token_logps(self, model, input_ids, completion_ids):
        logits = model(input_ids=input_ids).logits
        logits = torch.nan_to_num(logits, nan=0.0)
        logps = selective_log_softmax(logits, completion_ids)
        with torch.no_grad():
            entropies = entropy_from_logits(logits)
        return logps, entropies
"""

# DPO's concatenated forward: a statistic under no_grad, NaN logits masked to 0 before
# the log-probs and the NLL term it hands to the loss
DPO_FORWARD = """\
import torch
import torch.nn.functional as F

def concatenated_forward(model, batch, stats):
    logits = model(batch["input_ids"]).logits
    with torch.no_grad():
        stats["mean_logit"] = logits.mean().item()
    logits[torch.isnan(logits)] = 0.0
    logps = F.log_softmax(logits, dim=-1)
    nll_loss = F.cross_entropy(logits[:, :-1], batch["labels"])
    return logps[:, 0], logps[:, 1], nll_loss
"""

# The same cleaning inside the block: what is cleaned there trains nothing
INSIDE_THE_BLOCK = """\
import torch

class Trainer:
    def _get_per_token_logps(self, model, input_ids, completion_ids):
        logits = model(input_ids=input_ids).logits
        logps = selective_log_softmax(logits, completion_ids)
        with torch.no_grad():
            shown = torch.nan_to_num(logits, nan=0.0)
            entropies = entropy_from_logits(shown)
        return logps, entropies
"""

DECORATED = """\
import torch

@torch.no_grad()
def score(model, input_ids, completion_ids):
    logits = model(input_ids=input_ids).logits
    logits = torch.nan_to_num(logits, nan=0.0)
    logps = selective_log_softmax(logits, completion_ids)
    entropies = entropy_from_logits(logits)
    return logps, entropies
"""

EVAL_MODE = """\
import torch

def reference_logps(model, input_ids, completion_ids):
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    logits = torch.nan_to_num(logits, nan=0.0)
    entropies = entropy_from_logits(logits)
    return selective_log_softmax(logits, completion_ids), entropies
"""

# the forward pass is inside the block; outside it the model is only unwrapped
UNWRAPPED_ONLY = """\
import torch

class Trainer:
    def _reference_logps(self, model, input_ids, completion_ids):
        unwrapped = self.accelerator.unwrap_model(model)
        with torch.no_grad():
            logits = unwrapped(input_ids=input_ids).logits
        logits = torch.nan_to_num(logits, nan=0.0)
        entropies = entropy_from_logits(logits)
        return selective_log_softmax(logits, completion_ids), entropies
"""

EVALUATION_NAME = """\
import torch

def validate(model, input_ids, labels):
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    logits = torch.nan_to_num(logits, nan=0.0)
    val_loss = cross_entropy(logits, labels)
    return val_loss
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    ("source", "expected"),
    [(TORCH_LOGPS, [(6, "NZ101")]), (DPO_FORWARD, [(8, "NZ105")])],
    ids=["logps-beside-entropy", "dpo-statistic"],
)
def test_cleaning_outside_a_no_grad_block_is_found(
    source: str, expected: list[tuple[int, str]]
) -> None:
    assert findings(source) == expected


@pytest.mark.parametrize(
    "source",
    [INSIDE_THE_BLOCK, DECORATED, EVAL_MODE, UNWRAPPED_ONLY, EVALUATION_NAME],
    ids=["inside-the-block", "decorated", "eval-mode", "unwrapped-only", "evaluation-name"],
)
def test_observing_code_stays_clean(source: str) -> None:
    assert findings(source) == []
