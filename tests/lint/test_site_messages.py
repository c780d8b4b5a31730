"""One site, one finding, in words that say what the code does: a keep-old-state select
over params and opt_state on one flag is one site; a conditional expression is not
reported as ``where(...)``."""

from __future__ import annotations

import textwrap

from nozero.lint.engine import lint_source

KEEP_BOTH = """\
import jax
import jax.numpy as jnp
import optax

def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    ok = jnp.isfinite(loss)
    params = jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new_params, params)
    opt_state = jax.tree_util.tree_map(
        lambda n, o: jnp.where(ok, n, o), new_opt_state, opt_state
    )
    return params, opt_state, loss
"""


def _found(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in lint_source(textwrap.dedent(source), "t.py")]


def test_one_flag_keeping_params_and_opt_state_is_one_finding():
    assert [(line, code) for line, code, _ in _found(KEEP_BOTH)] == [(10, "NZ410")]
    # two flags are two sites
    two_flags = KEEP_BOTH.replace(
        "    opt_state = jax.tree_util.tree_map(\n        lambda n, o: jnp.where(ok, n, o)",
        "    fine = jnp.isfinite(loss)\n    opt_state = jax.tree_util.tree_map(\n"
        "        lambda n, o: jnp.where(fine, n, o)",
    )
    assert [(line, code) for line, code, _ in _found(two_flags)] == [
        (10, "NZ410"),
        (12, "NZ410"),
    ]


TERNARY = """\
import torch

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss = loss if torch.isfinite(loss) else torch.zeros_like(loss)
        loss.backward()
        optimizer.step()
"""


def test_a_conditional_expression_is_not_called_where():
    [(line, code, message)] = _found(TERNARY)
    assert (line, code) == (6, "NZ103")
    assert "conditional expression" in message
    assert "where" not in message
    selected = TERNARY.replace(
        "loss if torch.isfinite(loss) else torch.zeros_like(loss)",
        "torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss))",
    )
    [(line, code, message)] = _found(selected)
    assert (line, code) == (6, "NZ103")
    assert "where(...)" in message


ZERO_LOSS_HELPER = """\
import torch

def safe_loss(loss):
    if torch.isnan(loss):
        return {value}
    return loss

def train(model, loader, optimizer):
    for batch in loader:
        loss = safe_loss(model(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_constant_handed_back_for_the_loss_is_not_called_a_skipped_step():
    for value in ("loss.new_zeros(())", "torch.zeros_like(loss)", "torch.tensor(0.0)"):
        [(line, code, message)] = _found(ZERO_LOSS_HELPER.format(value=value))
        assert (line, code) == (5, "NZ201"), value
        assert "a constant is handed back in its place here" in message, value
        assert "skipped" not in message, value
    # a call that computes a value is still read as leaving the step
    [(_, _, message)] = _found(ZERO_LOSS_HELPER.format(value="recompute(loss)"))
    assert "the step is skipped here" in message


LOSS_AND_LOGS = """\
import torch

class Diffusion:
    def p_losses(self, batch):
        loss = self.model(batch).mean()
        if torch.isnan(loss) or torch.isinf(loss) or loss > 1000.0:
            print("abnormal loss, skipping the batch")
            return {value}
        return loss, {{"loss": loss.item()}}
"""


def test_a_constant_loss_handed_back_with_its_logs_is_a_constant():
    """``(loss, logs)`` pairs: the constant stands in for the loss whatever rides beside it."""
    for value in ("torch.tensor(0.0, requires_grad=True), {}", "torch.zeros(()), None, {}"):
        [(line, code, message)] = _found(LOSS_AND_LOGS.format(value=value))
        assert (line, code) == (8, "NZ201"), value
        assert "a constant is handed back in its place here" in message, value
    # the tested loss handed on beside a constant: the caller still gets the NaN
    handed_on = _found(LOSS_AND_LOGS.format(value="loss, torch.zeros(())"))
    assert not any("a constant is handed back" in message for _, _, message in handed_on)
