"""Three shapes of training code, each read by what happens next:

- an optimizer step taken only when a value is finite skips the update silently, whatever
  the value is called (a norm handed in from another module, a float);
- a ``continue`` that is the last statement of its loop's body skips nothing: the check
  around it only observes, as a check that prints does;
- a helper that zeroes or cleans the gradients of what it is given is a finding where it
  does so and at each call that hands it a model's parameters, a model or an optimizer,
  in the same module or imported from another.
"""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

from .conftest import write_project

GATED_BY_A_NORM = """\
import numpy as np

class OptimizerWrapper:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self, total_norm: float) -> None:
        if np.isfinite(total_norm):
            self.optimizer.step()
"""

GATED_IN_JAX = """\
import jax.numpy as jnp
import optax

def apply(params, updates, norm):
    if jnp.isfinite(norm):
        params = optax.apply_updates(params, updates)
    return params
"""

GATED_WITH_A_PRINT = """\
import math

def train(model, loader, optimizer, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        value = loss.item()
        if not math.isfinite(value):
            print("not finite")
        else:
            optimizer.step()
"""

GATED_WITHOUT_MIXED_PRECISION = """\
import numpy as np

class OptimizerWrapper:
    def __init__(self, args, optimizer, scaler):
        self.args, self.optimizer, self.scaler = args, optimizer, scaler

    def step(self, total_norm: float) -> None:
        if not self.args.no_amp:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif np.isfinite(total_norm):
            self.optimizer.step()
"""

SCHEDULER_ON_A_FINITE_METRIC = """\
import math

def train(model, loader, optimizer, scheduler, evaluate):
    for x, y in loader:
        optimizer.step()
    score = evaluate(model)
    if math.isfinite(score):
        scheduler.step(score)
"""

RAISES_ON_A_NORM = """\
import numpy as np

def step(optimizer, total_norm):
    if not np.isfinite(total_norm):
        raise RuntimeError(f"gradient norm is {total_norm}")
    optimizer.step()
"""

CONTINUE_AT_THE_END = """\
import torch

def train(model, loader, optimizer, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        outputs = model(x)
        loss = criterion(outputs, y)
        loss.backward()
        optimizer.step()
        if torch.isnan(outputs).any():
            print("outputs hold NaN")
            continue
"""

CONTINUE_BEFORE_THE_STEP = """\
import torch

def train(model, loader, optimizer, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        if torch.isnan(loss):
            print("loss is NaN")
            continue
        loss.backward()
        optimizer.step()
"""

CONTINUE_BEFORE_THE_REST = """\
import torch

def train(model, loader, optimizer, criterion, history):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if torch.isnan(loss):
            continue
        history.append(loss.item())
"""

ZEROING_HELPER = """\
import math

import torch

def isnan(tensor):
    return tensor != tensor

def finite_check(parameters):
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    for p in parameters:
        p.grad.data[p.grad.data.abs() == math.inf] = 0
        p.grad.data[isnan(p.grad.data)] = 0
"""

LOOP_CALLING_IT = """
def train(model, loader, optimizer, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        finite_check(model.parameters())
        optimizer.step()
"""

MODEL_HANDED_OVER = """\
import torch

def clean_grads(model):
    for p in model.parameters():
        if p.grad is not None:
            p.grad.nan_to_num_(0.0)

def train(model, loader, optimizer, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        clean_grads(model)
        optimizer.step()
"""

STEP_CLEANING_ITS_OWN_LOSS = """\
import torch

def train_step(model, batch, optimizer):
    loss = model(batch).mean()
    loss = torch.nan_to_num(loss)
    loss.backward()
    optimizer.step()

def train(model, loader, optimizer):
    for batch in loader:
        train_step(model, batch, optimizer)
"""


INFINITY_MASKS = """\
import math

def clean(model):
    for p in model.parameters():
        p.grad.data[p.grad.data.abs() == math.inf] = 0
        p.grad[p.grad == float("inf")] = 0.0
"""


def findings(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in lint_source(textwrap.dedent(source), "train.py")]


@pytest.mark.parametrize(
    ("source", "line"),
    [
        (GATED_BY_A_NORM, 8),
        (GATED_IN_JAX, 5),
        (GATED_WITH_A_PRINT, 9),
        (GATED_WITHOUT_MIXED_PRECISION, 11),
    ],
    ids=["torch-wrapper", "optax", "print-else-step", "no-amp-branch"],
)
def test_a_step_taken_only_when_a_value_is_finite_is_a_skip(source, line) -> None:
    ((found_line, code, message),) = findings(source)
    assert (found_line, code) == (line, "NZ201")
    assert "only taken when the values are finite" in message


@pytest.mark.parametrize(
    "source",
    [SCHEDULER_ON_A_FINITE_METRIC, RAISES_ON_A_NORM],
    ids=["scheduler-step", "raises"],
)
def test_a_scheduler_step_or_a_raise_is_no_skipped_update(source) -> None:
    assert findings(source) == []


def test_a_continue_that_ends_the_loop_body_skips_nothing() -> None:
    assert findings(CONTINUE_AT_THE_END) == []  # a print and nothing skipped: a diagnostic
    found = lint_source(textwrap.dedent(CONTINUE_AT_THE_END), "train.py", select={"NZ203"})
    [(line, code, message)] = [(f.line, f.code, f.message) for f in found]
    assert (line, code) == (10, "NZ203")
    assert "the check only reports" in message
    assert "skipped" not in message


@pytest.mark.parametrize(
    ("source", "line", "what"),
    [
        (CONTINUE_BEFORE_THE_STEP, 9, "the step is skipped here"),
        (CONTINUE_BEFORE_THE_REST, 10, "the rest of the iteration is skipped here"),
    ],
    ids=["before-the-step", "before-the-rest"],
)
def test_a_continue_with_work_after_it_is_still_a_skip(source, line, what) -> None:
    ((found_line, code, message),) = findings(source)
    assert (found_line, code) == (line, "NZ201")
    assert what in message


def test_a_zeroing_helper_is_found_in_its_body_and_at_its_call() -> None:
    found = findings(ZEROING_HELPER + LOOP_CALLING_IT)
    assert [(line, code) for line, code, _ in found] == [
        (12, "NZ105"),
        (13, "NZ105"),
        (20, "NZ101"),
    ]
    assert "through finite_check()" in found[2][2]


def test_a_helper_handed_the_model_is_found_at_the_call() -> None:
    found = [
        (line, code, "through clean_grads()" in m) for line, code, m in findings(MODEL_HANDED_OVER)
    ]
    assert found == [(6, "NZ101", False), (13, "NZ101", True)]


def test_a_step_cleaning_a_loss_it_computes_is_found_once() -> None:
    # the loss is computed from the model, not handed in: the call is no cleaning
    assert [(line, code) for line, code, _ in findings(STEP_CLEANING_ITS_OWN_LOSS)] == [
        (5, "NZ101")
    ]


def test_a_mask_comparing_gradients_with_infinity_is_a_non_finite_mask() -> None:
    assert [(line, code) for line, code, _ in findings(INFINITY_MASKS)] == [
        (5, "NZ105"),
        (6, "NZ105"),
    ]


_HELPER, _, _LOOP = MODEL_HANDED_OVER.partition("\ndef train")


@pytest.mark.parametrize(
    ("helper", "train", "site"),
    [
        (
            ZEROING_HELPER,
            "from pkg.helpers import finite_check\n" + LOOP_CALLING_IT,
            "train.py:8:9: NZ101 nan_to_num on training signal hides a non-finite value "
            "instead of stopping (through finite_check())",
        ),
        (
            _HELPER,
            "from pkg.helpers import clean_grads\n\ndef train" + _LOOP,
            "train.py:8:9: NZ101 nan_to_num on training signal hides a non-finite value "
            "instead of stopping (through clean_grads())",
        ),
    ],
    ids=["parameters-handed-over", "model-handed-over"],
)
def test_a_zeroing_helper_imported_from_another_module_is_found_at_the_call(
    lint, tmp_path, helper, train, site
) -> None:
    files = {"pkg/__init__.py": "", "pkg/helpers.py": helper, "pkg/train.py": train}
    write_project(tmp_path / "project", files)
    result = lint("project/pkg/train.py", "--no-cache")
    assert result.code == 1, result.err
    assert result.out.count(" NZ") == 1 and site in result.out
    # the helper's summary carries what it cleans: a cold cache and a warm one agree
    cold, warm = lint("project/pkg/train.py"), lint("project/pkg/train.py")
    assert cold.out == warm.out == result.out
