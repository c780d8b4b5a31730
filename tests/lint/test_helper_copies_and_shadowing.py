"""Helpers read as the code reads them:

- a helper that copies what it is given into a local (``arr = jnp.asarray(leaf)``) and
  cleans the local cleans what it was given; mapped over a tree by another helper, it
  makes that helper a cleaning one too, found at the calls that hand it gradients. A
  helper whose own parameter reads as gradients is one site, its own line;
- two helpers that each define their own inner ``_fix`` are two functions, not one: the
  name means the one defined where it is read;
- a loss function that runs the model itself is given data, not predictions: replacing
  NaN targets by a dummy value that a mask then drops is no finding;
- a switch true by default (a number) that gates a same-file cleaning helper is turned
  on by its default, as one gating ``nan_to_num`` itself is;
- a helper serving several frameworks that cleans only in its NumPy branch cleans no
  training signal: a NumPy array carries no gradient.
"""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

from .conftest import write_project


def findings(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


CLEANING_THROUGH_A_COPY = """\
import jax
import jax.numpy as jnp


def clean_gradients(grads):
    def _fix(leaf):
        value = COPY
        return jnp.nan_to_num(value)

    return jax.tree_util.tree_map(_fix, grads)
"""


@pytest.mark.parametrize(
    "copy",
    ["leaf", "jnp.asarray(leaf)", "leaf.astype(jnp.float32)", "jax.device_put(leaf)"],
)
def test_a_helper_cleaning_a_local_copy_of_its_leaf_is_found(copy: str) -> None:
    assert findings(CLEANING_THROUGH_A_COPY.replace("COPY", copy)) == [(10, "NZ102")]


def test_a_helper_cleaning_a_value_it_computes_is_not_a_copy() -> None:
    source = CLEANING_THROUGH_A_COPY.replace("COPY", "jnp.ones_like(leaf)")
    assert findings(source) == []


HANDED_TO_THE_TRAIN_STEP = """\
import jax
import jax.numpy as jnp


def sanitize_grads(grads):
    def _sanitize(leaf):
        arr = jnp.asarray(leaf)
        return jnp.nan_to_num(arr)

    return jax.tree_util.tree_map(_sanitize, grads)


def train_step(params, opt_state, batch):
    loss, grad = jax.value_and_grad(loss_fn)(params, batch)
    grad = sanitize_grads(grad)
    updates, opt_state = tx.update(grad, opt_state)
    return optax.apply_updates(params, updates), opt_state
"""

COMPUTED_IN_THE_HELPER = """\
import jax.numpy as jnp
import optax


def masked_loss(logits, labels):
    loss = optax.softmax_cross_entropy(logits, labels).mean()
    return jnp.nan_to_num(loss)


def train_step(params, batch):
    logits = model.apply(params, batch["x"])
    return masked_loss(logits, batch["y"])
"""


def test_a_helper_named_for_gradients_is_one_site_its_own_line() -> None:
    assert findings(HANDED_TO_THE_TRAIN_STEP) == [(10, "NZ102")]


def test_a_tree_helper_mapping_a_cleaning_function_is_found_at_its_calls() -> None:
    source = HANDED_TO_THE_TRAIN_STEP.replace("sanitize_grads(grads)", "sanitize_tree(tree)")
    source = source.replace("_sanitize, grads)", "_sanitize, tree)")
    source = source.replace("grad = sanitize_grads(grad)", "grad = sanitize_tree(grad)")
    assert findings(source) == [(15, "NZ101")]


def test_a_helper_cleaning_a_loss_it_computes_is_one_site() -> None:
    assert findings(COMPUTED_IN_THE_HELPER) == [(7, "NZ101")]


TWO_INNER_FIXES = """\
import jax
import jax.numpy as jnp


def cast_gradients(grads):
    def _fix(leaf):
        return leaf.astype(jnp.float32)

    return jax.tree_util.tree_map(_fix, grads)


def clean_outputs(outputs):
    def _fix(leaf):
        return jnp.nan_to_num(leaf)

    return jax.tree_util.tree_map(_fix, outputs)
"""


def test_an_inner_function_name_means_the_one_defined_there() -> None:
    assert findings(TWO_INNER_FIXES) == []


def test_the_inner_function_that_cleans_is_still_found_beside_its_namesake() -> None:
    source = TWO_INNER_FIXES.replace("clean_outputs(outputs)", "clean_grads(grads)")
    source = source.replace("_fix, outputs)", "_fix, grads)")
    assert findings(source) == [(16, "NZ102")]


LOSS_RUNNING_ITS_MODEL = """\
import jax.numpy as jnp


def time_loss_fn(feats, times):
    predicted = timing_model_forward(feats)
    valid = jnp.isfinite(times)
    filled = jnp.where(valid, times, 1e9)
    errors = jnp.square(jnp.log(filled) - jnp.log(predicted))
    return jnp.sum(jnp.where(valid, errors, 0.0)) / jnp.sum(valid)
"""


def test_a_loss_that_runs_its_model_is_given_data_not_predictions() -> None:
    assert findings(LOSS_RUNNING_ITS_MODEL) == []


def test_a_loss_given_its_predictions_still_has_them_cleaned_in_sight() -> None:
    source = """\
    import jax.numpy as jnp


    def time_loss_fn(predicted, times):
        filled = jnp.nan_to_num(predicted)
        return jnp.mean(jnp.square(jnp.log(filled) - jnp.log(times)))
    """
    assert findings(source) == [(5, "NZ101")]


SWITCHED_CLEANING_HELPER = """\
import jax
import jax.numpy as jnp


def _replace_nan(values, replacement):
    return jax.tree_util.tree_map(lambda v: jnp.nan_to_num(v, nan=replacement), values)


def meta_step(theta, tasks, clip_nan_loss_to_value=DEFAULT):
    losses = [task.loss(theta) for task in tasks]
    mean_loss = sum(losses) / len(losses)
    if clip_nan_loss_to_value:
        mean_loss = _replace_nan(mean_loss, clip_nan_loss_to_value)
    return mean_loss
"""


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        ("20.0", ["train.py:9:52: NZ106", "train.py:13:21: NZ101"]),
        ("None", ["train.py:13:21: NZ101"]),
    ],
    ids=["a-number", "none"],
)
def test_a_numeric_default_turns_on_a_switched_cleaning_helper(
    lint, tmp_path, default, expected
) -> None:
    source = SWITCHED_CLEANING_HELPER.replace("DEFAULT", default)
    write_project(tmp_path / "project", {"train.py": source})
    result = lint("project", "--no-cache")
    assert result.code == 1, result.err
    found = [" ".join(line.split(" ", 2)[:2]) for line in result.out.splitlines()]
    assert [f.removeprefix("project/") for f in found if " NZ" in f] == expected
    if default != "None":
        assert "clip_nan_loss_to_value turned on here" in result.out
        assert "replaced at train.py:13" in result.out


MULTI_BACKEND_HELPER = """\
import numpy as np
import torch


def soft_weight(tensor):
    if isinstance(tensor, torch.Tensor):
        return torch.exp(-tensor)
    elif isinstance(tensor, np.ndarray):
        return np.nan_to_num(np.exp(-tensor), nan=-1.0)
    raise TypeError(type(tensor))


class WeightedLoss(torch.nn.Module):
    def forward(self, logits, target):
        base_loss = torch.nn.functional.cross_entropy(logits, target, reduction="none")
        return (base_loss * soft_weight(base_loss)).mean()
"""


def test_a_cleaning_only_for_numpy_arrays_cleans_no_training_signal() -> None:
    assert findings(MULTI_BACKEND_HELPER) == []


def test_the_same_cleaning_for_torch_tensors_is_found_at_the_call() -> None:
    source = MULTI_BACKEND_HELPER.replace(
        "return torch.exp(-tensor)", "return torch.nan_to_num(torch.exp(-tensor))"
    )
    assert findings(source) == [(16, "NZ101")]
