"""Shapes of JAX and TF research code, each with what a reader would call it:

- a step function made by a factory keeps the old state on a NaN loss when the factory's
  parameter says so; the training script feeds that parameter from a config key, and the
  config modules that set the key turn the reaction on (findings there, with the route);
- a finiteness assertion (``chex.assert_tree_all_finite``) caught in the training loop and
  only counted is a swallow; re-raised at once, it is not;
- one flag reduced over every gradient's test (``tf.reduce_any([...])``) that replaces
  the gradients by zeros is a select on a non-finite test.
"""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

from .conftest import write_project

FACTORY = """\
import jax
import jax.numpy as jnp


def make_training_step(optimizer_step, reset_if_nan: bool = False):
    def step(params, state, batch):
        new_params, new_state, loss = optimizer_step(params, state, batch)
        if reset_if_nan:
            new_params = jax.lax.cond(jnp.isnan(loss), lambda: params, lambda: new_params)
        return new_params, new_state, loss

    return step


def train(cfg, optimizer_step, params, state, batches):
    step = make_training_step(optimizer_step, reset_if_nan=cfg.optim.reset_if_nan)
    for batch in batches:
        params, state, loss = step(params, state, batch)
    return params
"""

CONFIG_ATTRIBUTE = """\
from pkg import base_config


def get_config():
    cfg = base_config.default()
    cfg.optim.reset_if_nan = True
    return cfg
"""

CONFIG_DICT = """\
PRESETS = {
    "stable": {"optim": {"reset_if_nan": True, "lr": 1e-3}},
    "plain": {"optim": {"reset_if_nan": False}},
}
"""

COUNTED_ASSERTION = """\
import chex


def train(step, params, batches, allow_nans):
    failures = 0
    for batch in batches:
        params, loss = step(params, batch)
        try:
            chex.assert_tree_all_finite({"params": params, "loss": loss})
            failures = 0
        except AssertionError as err:
            if allow_nans:
                failures += 1
                if failures > 100:
                    raise err
            else:
                raise err
    return params
"""

RERAISED_ASSERTION = """\
import chex


def train(step, params, batches):
    for batch in batches:
        params, loss = step(params, batch)
        try:
            chex.assert_tree_all_finite({"params": params, "loss": loss})
        except AssertionError:
            print("non-finite state at this batch")
            raise
    return params
"""

TF_REDUCED_FLAG = """\
import tensorflow as tf


class RobustOptimizer:
    def __init__(self, inner):
        self.inner = inner
        self.retries = tf.Variable(0)

    def apply_gradients(self, grads_and_vars):
        grads_and_vars = list(grads_and_vars)
        grads = [grad for grad, var in grads_and_vars]
        variables = [var for grad, var in grads_and_vars]
        any_nan = tf.reduce_any([tf.reduce_any(tf.math.is_nan(g)) for g in grads])
        safe = [tf.where(any_nan, tf.zeros_like(g), g) for g in grads]
        self.retries.assign(tf.where(any_nan, self.retries + 1, 0))  # a count: no finding
        return self.inner.apply_gradients(zip(safe, variables))
"""


def findings(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in lint_source(textwrap.dedent(source), "train.py")]


def test_the_factory_step_keeps_the_old_state_where_it_is_written() -> None:
    assert [(line, code) for line, code, _ in findings(FACTORY)] == [(9, "NZ410")]


def test_config_modules_that_set_the_forwarded_key_turn_the_reaction_on(lint, tmp_path) -> None:
    write_project(
        tmp_path / "project",
        {
            "pkg/__init__.py": "",
            "pkg/train.py": FACTORY,
            "pkg/configs/__init__.py": "",
            "pkg/configs/stable.py": CONFIG_ATTRIBUTE,
            "pkg/configs/presets.py": CONFIG_DICT,
        },
    )
    result = lint("project", "--no-cache")
    assert result.code == 1, result.err
    lines = sorted(line.split(" NZ")[0] for line in result.out.splitlines() if " NZ" in line)
    assert lines == [
        "project/pkg/configs/presets.py:2:26:",
        "project/pkg/configs/stable.py:6:5:",
        "project/pkg/train.py:9:13:",
    ]
    assert "reset_if_nan turned on here" in result.out
    assert "pkg/train.py:9)" in result.out
    # one changed config file, linted alone (as pre-commit does), finds the same
    alone = lint("project/pkg/configs/stable.py", "--no-cache")
    assert "stable.py:6:5: NZ410 " in alone.out


def test_a_caught_assertion_only_counted_is_a_swallow() -> None:
    ((line, code, message),) = findings(COUNTED_ASSERTION)
    assert (line, code) == (11, "NZ301")
    assert "assert_tree_all_finite" in message


@pytest.mark.parametrize("source", [RERAISED_ASSERTION], ids=["re-raised"])
def test_a_caught_assertion_raised_again_is_no_swallow(source: str) -> None:
    assert findings(source) == []


def test_one_flag_over_every_gradient_replacing_them_is_a_select() -> None:
    ((line, code, _),) = findings(TF_REDUCED_FLAG)
    assert (line, code) == (14, "NZ103")
