"""A helper that checks a model's or an optimizer's gradients and hands back the verdict
(``validate_gradient(model)``, ``grads_all_finite(optimizer)``), by a loop that returns
``False`` on the first non-finite gradient or by ``all(...)`` over them: a training loop
that skips the step on its answer is found, in the file and from another module of the
project (a Lightning hook hands its own module, ``self``). A caller that raises on the
answer, ends the loop on it (``break``), or only logs it and steps stays clean."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

from .conftest import write

TORCH_LOOP_HELPER = """\
import torch

def validate_gradient(model):
    for name, param in model.named_parameters():
        if param.grad is not None:
            if torch.any(torch.isnan(param.grad)) or torch.any(torch.isinf(param.grad)):
                print("bad gradient in", name)
                return False
    return True

def train(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if not validate_gradient(model):
            optimizer.zero_grad()
            continue
        optimizer.step()
"""

TORCH_OPTIMIZER_HELPER = """\
import torch as th

def grads_all_finite(optimizer):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None and not th.all(th.isfinite(p.grad)).item():
                return False
    return True

def fit(model, loader, opt):
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()
        if grads_all_finite(opt):
            opt.step()
        opt.zero_grad()
"""

# Keras: the loop ends on the answer (a break out of training is a halt)
KERAS_BREAKS = """\
import tensorflow as tf

def weights_finite(model):
    return all(bool(tf.reduce_all(tf.math.is_finite(w))) for w in model.trainable_weights)

def train(model, dataset, optimizer, loss_fn):
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        if not weights_finite(model):
            break
"""

LIGHTNING_HOOK = """\
import lightning.pytorch as pl
import torch

def all_finite(model):
    return all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

class Module(pl.LightningModule):
    def on_before_optimizer_step(self, optimizer):
        if not all_finite(self):
            optimizer.zero_grad()
"""

RAISES_ON_THE_ANSWER = """\
import torch

def grads_finite(model):
    for p in model.parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            return False
    return True

def train(model, loader, optimizer):
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if not grads_finite(model):
            raise FloatingPointError(f"non-finite gradient at step {step}")
        optimizer.step()
"""

LOGS_AND_STEPS = """\
import logging
import torch

def grads_finite(model):
    return all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

def train(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        logging.info("finite gradients: %s", grads_finite(model))
        optimizer.step()
"""


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (TORCH_LOOP_HELPER, [(16, "NZ201")]),
        (TORCH_OPTIMIZER_HELPER, [(14, "NZ201")]),
        (LIGHTNING_HOOK, [(10, "NZ201")]),
    ],
    ids=["torch-loop-returns-false", "torch-optimizer-groups", "lightning-hook"],
)
def test_a_step_skipped_on_a_gradient_check_helper_is_found(source, expected) -> None:
    assert findings(source) == expected


@pytest.mark.parametrize(
    "source",
    [RAISES_ON_THE_ANSWER, LOGS_AND_STEPS, KERAS_BREAKS],
    ids=["raises", "logs-and-steps", "keras-breaks"],
)
def test_a_caller_that_raises_or_only_logs_stays_clean(source) -> None:
    assert findings(source) == []


def test_the_helper_imported_from_another_module_is_found(lint, tmp_path) -> None:
    helper, _, loop = TORCH_LOOP_HELPER.partition("\ndef train")
    root = tmp_path / "project"
    write(root / "pyproject.toml", "[project]\nname = 'p'\n")
    write(root / "pkg" / "__init__.py", "")
    write(root / "pkg" / "checks.py", helper)
    write(
        root / "pkg" / "train.py",
        "import torch\nfrom pkg.checks import validate_gradient\n\ndef train" + loop,
    )
    result = lint(str(root / "pkg" / "train.py"), "--no-cache")
    assert result.code == 1, result.err
    assert ":9:13: NZ201 " in result.out and "validate_gradient() tested" in result.out
