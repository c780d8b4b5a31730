"""PyTorch trainers in styles the recipes do not show, in one pytest subprocess (torch
must not load twice in one process): a Lightning Fabric loop whose ``clip_gradients``
raises torch's own error is told which check fired and how to hand its norm to the guard,
and the troubleshooting page's Fabric recipe, as printed, passes; torch's own non-finite
errors (anomaly mode, ``_assert_async``, ``clip_grad_norm_``) are named; Keras 3 on the
torch backend with ``TerminateOnNaN`` returns its History, and the failure says that
callback stops without raising."""

from __future__ import annotations

import importlib.util

import pytest
from docs_blocks import python_blocks

pytest_plugins = ["pytester"]
RUNS_DOCS_BLOCKS = {"plugin/troubleshooting.md": 1}
FABRIC_RECIPE = "# conftest.py — a Lightning Fabric loop"

FOREIGN_TORCH = """
import pytest
import torch

from nozero.plugin.foreign import foreign_check


def test_torch_errors_are_named():
    weight = torch.ones(2, requires_grad=True)
    with torch.autograd.detect_anomaly(), pytest.raises(RuntimeError) as anomaly:
        (weight * torch.tensor([float("nan"), 1.0])).sum().backward()
    assert "anomaly detection" in foreign_check(anomaly.value)
    with pytest.raises(RuntimeError) as assert_async:
        torch._assert_async(torch.tensor(False))
    assert "torch._assert_async" in foreign_check(assert_async.value)
    with pytest.raises(RuntimeError) as clip:
        weight.grad = torch.tensor([float("inf"), 1.0])
        torch.nn.utils.clip_grad_norm_([weight], 1.0, error_if_nonfinite=True)
    assert "error_if_nonfinite=False" in foreign_check(clip.value)
"""


KERAS_TERMINATE_ON_NAN = """
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np
import pytest

from nozero.testing import TrainerUnderTest

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, "relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.optimizer.build(model.trainable_variables)
variables = model.variables + model.optimizer.variables
first_values = [keras.ops.convert_to_numpy(v.value).copy() for v in variables]


def train(batches):
    for variable, value in zip(variables, first_values):
        variable.assign(value)
    x = np.concatenate([b["x"] for b in batches])
    y = np.concatenate([b["y"] for b in batches])
    return model.fit(x, y, batch_size=8, shuffle=False, verbose=0,
                     callbacks=[keras.callbacks.TerminateOnNaN()])


@pytest.fixture
def nozero_trainer():
    rng = np.random.default_rng(0)
    return TrainerUnderTest.from_example(
        {"x": rng.standard_normal((8, 4)).astype(np.float32),
         "y": rng.standard_normal((8, 1)).astype(np.float32)}, train)
"""


def test_fabric_and_keras_torch_trainers_get_their_fix_named(contract_dir, monkeypatch):
    for module in ("torch", "lightning_fabric", "keras"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    contract_dir.makepyfile(test_foreign_torch=FOREIGN_TORCH)
    (recipe,) = python_blocks("plugin/troubleshooting.md", first_line_prefix=FABRIC_RECIPE)
    assert len(python_blocks("plugin/troubleshooting.md")) == 1
    contract_dir.mkpydir("fabric_recipe").joinpath("conftest.py").write_text(recipe)
    contract_dir.mkpydir("keras_torch").joinpath("conftest.py").write_text(KERAS_TERMINATE_ON_NAN)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(contract_dir.path))  # the trainers' modules
    result = contract_dir.runpytest_subprocess(
        "--nozero",
        "--nozero-examples=3",
        "--hypothesis-seed=0",
        "-p",
        "no:cacheprovider",
        "-v",
        "--nozero-trainer=styles_torch:fabric_default",
        "-k",
        "fabric_recipe or (fabric_default and halts) or test_torch_errors "
        "or (keras_torch and halts)",
        timeout=240,
    )
    result.stdout.fnmatch_lines_random(
        [
            f"fabric_recipe/nozero::{check}[[]nozero_trainer[]] PASSED*"
            for check in ("halts", "overflow", "no_false_alarm", "never_continue")
        ]
        + [
            "nozero::halts[[]styles_torch:fabric_default[]] FAILED*",
            "test_foreign_torch.py::test_torch_errors_are_named PASSED*",
            "keras_torch/nozero::halts[[]nozero_trainer[]] FAILED*",
        ]
    )
    text = result.stdout.str()
    assert "this is a library's own non-finite check: torch.nn.utils.clip_grad_norm_" in text
    assert "Lightning Fabric's clip_gradients passes error_if_nonfinite=True" in text
    assert "pass error_if_nonfinite=False and hand the norm it returns to" in text
    assert "keras.callbacks.TerminateOnNaN ends fit after the bad step's update" in text
