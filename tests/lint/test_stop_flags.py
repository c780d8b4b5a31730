"""A flag that asks the run to end (``stop_training``, ``should_stop``), set where a loss
is not finite and read by a loop that leaves on it, is a halt: the training stops, as a
raise would stop it. The same flag named for a skip, or for stopping one part of the step
(``stop_update``), read the same way, still skips."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

# A training loop whose step sits behind a method, and a test in another method that sets
# the flag the loop reads after each step.
TORCH_STOP = """\
import torch

class Model:
    def _test(self):
        self.loss_train = self.evaluate()
        if torch.isnan(self.loss_train).any():
            self.stop_training = True

    def train(self, iterations):
        for i in range(iterations):
            self._train_step(self.data.next_batch())
            self._test()
            if self.stop_training:
                break
"""

KERAS_MODEL = """\
import tensorflow as tf
from tensorflow import keras

class PINN(keras.Model):
    def check(self, loss):
        if not tf.math.is_finite(loss):
            self.stop_training = True

    def run(self, steps):
        for step in range(steps):
            loss = self._train_step(step)
            self.check(loss)
            if self.stop_training:
                break
"""

LIGHTNING_SHOULD_STOP = """\
import torch

class Module:
    def watch(self, loss):
        if not torch.isfinite(loss):
            self.trainer.should_stop = True

    def run(self, loader):
        for batch in loader:
            loss = self._train_step(batch)
            self.watch(loss)
            if self.trainer.should_stop:
                break
"""

JAX_VALUE_FLAG = """\
import jax.numpy as jnp

class Runner:
    def run(self, state, batches):
        for batch in batches:
            state = self._train_step(state, batch)
            self.should_stop = jnp.isnan(state.loss).any()
            self.log(state)
            if self.should_stop:
                break
        return state
"""

# The look-alike that must still be found: the same route, named for a skip.
TORCH_SKIP = """\
import torch

class Model:
    def _check(self, loss):
        if torch.isnan(loss).any():
            self.skip_batch = True

    def train(self, loader):
        for batch in loader:
            loss = self.model(batch)
            self.skip_batch = False
            self._check(loss)
            if self.skip_batch:
                continue
            loss.backward()
            self.optimizer.step()
"""


# A flag that stops one part of the step, not the run: still a skip.
TORCH_STOP_UPDATE = TORCH_SKIP.replace("skip_batch", "stop_update")


def codes(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    "source",
    [TORCH_STOP, KERAS_MODEL, LIGHTNING_SHOULD_STOP, JAX_VALUE_FLAG],
    ids=["torch-stop_training", "keras-model", "lightning-should_stop", "jax-value-flag"],
)
def test_a_stop_flag_set_on_a_nan_loss_is_a_halt(source: str) -> None:
    assert codes(source) == []


@pytest.mark.parametrize("source", [TORCH_SKIP, TORCH_STOP_UPDATE], ids=["skip", "stop-update"])
def test_a_skip_flag_on_the_same_route_is_still_a_skipped_step(source: str) -> None:
    found = codes(source)
    assert found and {code for _, code in found} <= {"NZ201"}
    assert any(line == 14 for line, _ in found), found
