"""The framework recipes run as printed, and what the plugin reads from each framework:
flax.nnx (Dropout's typed keys, nnx.jit), Keras ``fit`` (its History, KERAS_BACKEND set by
the recipe), ``jax.pmap`` (count_traces, a check on one device), Lightning (its logged
metrics read as a history, its log noise silenced)."""

from __future__ import annotations

import importlib.util

# Imported once here so the in-process pytest runs below reuse them instead of reloading.
import flax  # noqa: F401
import jax  # noqa: F401
import optax  # noqa: F401
import pytest
from docs_blocks import python_blocks

pytest_plugins = ["pytester"]

# Read by the docs tests: every python block of these pages runs here.
RUNS_DOCS_BLOCKS = {"plugin/recipes/nnx.md": 1, "plugin/recipes/keras.md": 1}
FEW = ("--nozero", "--nozero-examples=5", "-p", "no:cacheprovider")


def _needs(module: str) -> None:
    """Skip unless ``module`` is installed; never imported here (torch must load in the
    subprocess only: a second load in this process crashes)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


def _subprocess_env(monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    monkeypatch.delenv("KERAS_BACKEND", raising=False)  # the recipe must set it itself
    for name, value in extra.items():
        monkeypatch.setenv(name, value)


def test_the_nnx_recipe_passes_its_four_checks_within_15_s(pytester):
    (block,) = python_blocks("plugin/recipes/nnx.md")
    assert len(python_blocks("plugin/recipes/nnx.md")) == RUNS_DOCS_BLOCKS["plugin/recipes/nnx.md"]
    pytester.makeconftest(block)
    reprec = pytester.inline_run("--nozero", "-p", "no:cacheprovider")  # 50 examples each
    reprec.assertoutcome(passed=4)
    calls = [r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    checks = sum(report.duration for report in calls)
    assert checks <= 15, f"the four checks took {checks:.1f} s"


BROKEN_KERAS = """
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras
import numpy as np
import pytest
from nozero.testing import TrainerUnderTest

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")


def train(batches):  # no callback: fit trains through a non-finite loss
    x = np.concatenate([b["x"] for b in batches])
    y = np.concatenate([b["y"] for b in batches])
    return model.fit(x, y, batch_size=8, shuffle=False, verbose=0)


@pytest.fixture
def nozero_trainer():
    rng = np.random.default_rng(0)
    batch = {"x": rng.standard_normal((8, 4)).astype(np.float32),
             "y": rng.standard_normal((8, 1)).astype(np.float32)}
    return TrainerUnderTest.from_example(batch, train)
"""


PMAP = """
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nozero
from nozero.testing import TrainerUnderTest, count_traces

tx = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1))


def loss_fn(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


def step(w, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(w, x, y)
    local_norm = optax.tree.norm(grads)  # this device's gradient, before averaging
    grads = jax.lax.pmean(grads, "devices")
    updates, opt_state = tx.update(grads, opt_state, w)
    worst = jax.lax.pmax(jnp.where(jnp.isfinite(loss + local_norm), 0.0, jnp.inf), "devices")
    return optax.apply_updates(w, updates), opt_state, loss, local_norm, worst


p_step = jax.pmap(step, axis_name="devices")


def make_run(device_zero_only):
    def run(batches):
        w = np.full((jax.local_device_count(), 4, 1), 0.1, np.float32)  # one copy a device
        opt_state = tx.init(w)  # clipping and plain SGD keep no arrays to replicate
        history = []
        for i, batch in enumerate(batches):
            w, opt_state, loss, norm, worst = p_step(w, opt_state, batch["x"], batch["y"])
            w = np.asarray(w)  # host copies in, every call alike: one compilation
            loss0, norm0 = float(loss[0]), float(norm[0])  # device 0's values
            if device_zero_only:
                nozero.check_finite(i, loss0, norm0)
            elif float(worst[0]) != 0.0:  # every device's flag, reduced with pmax
                bad = [j for j in range(len(loss)) if not np.isfinite(float(loss[j] + norm[j]))]
                nozero.check_finite(i, float(loss[bad[0]]), float(norm[bad[0]]))
            history.append((loss0, norm0))
        return history

    return run


@pytest.fixture(params=["all_devices", "device_zero_only"])
def nozero_trainer(request):
    rng = np.random.default_rng(0)
    batch = {"x": rng.standard_normal((2, 4, 4)).astype(np.float32),
             "y": rng.standard_normal((2, 4, 1)).astype(np.float32)}
    run = make_run(request.param == "device_zero_only")
    return TrainerUnderTest.from_example(batch, run, compile_count=count_traces(p_step))
"""


NO_TORCH = """
import sys

import jax.numpy as jnp
import numpy as np

from nozero.plugin.outcome import read_returned


def test_numpy_and_jax_values_are_read_without_importing_torch():
    assert "torch" not in sys.modules
    assert read_returned({"w": jnp.ones(2), "b": np.zeros(1)}).state_arrays == 2
    history = read_returned([{"loss": jnp.float32(1.0), "grad_norm": 2.0}]).history
    assert history.entries == ((1.0, 2.0),)
    assert "torch" not in sys.modules
"""


def test_keras_recipe_keras_history_and_pmap_trainers(pytester, monkeypatch):
    """One session (one start-up of JAX and Keras): the Keras recipe as printed and a Keras
    trainer without a guard, two pmap trainers on 2 host devices, and the reader never
    importing torch."""
    _needs("keras")
    (block,) = python_blocks("plugin/recipes/keras.md")
    pytester.mkpydir("keras_recipe").joinpath("conftest.py").write_text(block)
    pytester.mkpydir("keras_broken").joinpath("conftest.py").write_text(BROKEN_KERAS)
    pytester.mkpydir("pmap").joinpath("conftest.py").write_text(PMAP)
    pytester.makepyfile(test_no_torch=NO_TORCH)
    _subprocess_env(monkeypatch, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    selected = "keras_recipe or halts or (pmap and no_false_alarm) or without_importing"
    result = pytester.runpytest_subprocess(
        *FEW, "-v", "--hypothesis-seed=0", "-k", selected, timeout=300
    )
    result.stdout.fnmatch_lines_random(
        [
            f"keras_recipe/nozero::{check}[[]nozero_trainer[]] PASSED*"
            for check in ("halts", "overflow", "no_false_alarm", "never_continue")
        ]
        + [
            "keras_broken/nozero::halts[[]nozero_trainer[]] FAILED*",
            "*never raised: returned normally; its history's first non-finite entry is "
            "epoch 0: loss=nan grad_norm=not recorded",
            "pmap/nozero::halts[[]all_devices[]] PASSED*",
            "pmap/nozero::no_false_alarm[[]all_devices[]] PASSED*",
            "pmap/nozero::no_false_alarm[[]device_zero_only[]] PASSED*",
            "pmap/nozero::halts[[]device_zero_only[]] FAILED*",
            "test_no_torch.py::test_numpy_and_jax_values_are_read_without_importing_torch PASSED*",
        ]
    )
    text = result.stdout.str()
    assert "DeprecationWarning" not in text
    # pmap: a check on device 0 only is named as such; count_traces read the pmap
    assert "does it check one replica's or one device's values only" in text
    assert "poison: nan (nan) at batches[0]['x'][1, 0, 0]" in text  # device 1's rows
    assert "compiled" not in text


LIGHTNING = """
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

import nozero
from nozero.testing import TrainerUnderTest


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        loss = torch.mean((self.linear(batch["x"]) - batch["y"]) ** 2)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Guard(pl.Callback):
    def on_before_optimizer_step(self, trainer, module, optimizer):
        grad_norm = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in module.parameters()])
        )
        module.log("grad_norm", grad_norm)
        loss = trainer.callback_metrics["train_loss"]
        nozero.check_finite(trainer.global_step, loss, grad_norm)  # global_step: 0-based here


class LoggedMetrics(pl.Callback):
    def __init__(self):
        self.steps = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.steps.append(dict(trainer.callback_metrics))  # tensors: train_loss, grad_norm


def make_run(guarded):
    def run(batches):
        metrics = LoggedMetrics()
        trainer = pl.Trainer(
            max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
            callbacks=[Guard(), metrics] if guarded else [metrics],
        )
        trainer.fit(Regression(), DataLoader(batches, batch_size=None))
        return metrics.steps  # a list of per-step metric dicts

    return run


@pytest.fixture(params=["guarded", "unguarded"])
def nozero_trainer(request):
    batch = {"x": torch.randn(8, 4).numpy(), "y": torch.randn(8, 1).numpy()}
    run = make_run(request.param == "guarded")
    return TrainerUnderTest.from_example(batch, run, poison_fields=["x"])
"""


TORCH_VALUES = """
import torch

from nozero.plugin.outcome import read_returned


def test_torch_values_are_read_bfloat16_included():
    model = torch.nn.Linear(2, 1).to(torch.bfloat16)
    assert read_returned(model).state_arrays == 2
    with torch.no_grad():
        model.bias.fill_(float("nan"))
    bad = read_returned(model.state_dict()).bad_array
    assert bad == "['bias'] holds 1 non-finite values of 1"
    logged = [{"train_loss": torch.tensor(0.5), "grad_norm": torch.tensor(1.0)}]
    assert read_returned(logged).history.entries == ((0.5, 1.0),)
"""


def test_lightning_logged_metrics_are_read_as_a_history_and_its_logs_are_quiet(
    pytester, monkeypatch
):
    _needs("pytorch_lightning")
    pytester.makeconftest(LIGHTNING)
    pytester.makepyfile(test_torch_values=TORCH_VALUES)
    _subprocess_env(monkeypatch)
    options = ("--nozero-examples=2", "--nozero-steps=2", "-v", "-k", "halts or torch_values")
    result = pytester.runpytest_subprocess(*FEW, *options, timeout=240)
    result.stdout.fnmatch_lines_random(
        [
            "nozero::halts[[]guarded[]] PASSED*",
            "test_torch_values.py::test_torch_values_are_read_bfloat16_included PASSED*",
            "nozero::halts[[]unguarded[]] FAILED*",
            "*never raised: returned normally; its history's first non-finite entry is step 0:*",
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    for noise in ("GPU available", "TPU available", "FutureWarning", "LOCAL_RANK"):
        assert noise not in output
