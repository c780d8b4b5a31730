"""A broad ``except`` around a step whose own finiteness check raises: the handler that
hands back a made-up result (``return 0.0``, ``return None``) goes on as if the step had
run. The check may be a ``raise`` under a test, ``nozero.check_finite`` or torch's
``clip_grad_norm_(..., error_if_nonfinite=True)``; a handler that re-raises stays clean,
and so does a step in code that names no non-finite value at all (an out-of-memory
retry: nothing there is read for a rule). A step helper that catches any error and hands
back a made-up result, in code that does name one, swallows whatever raises in it."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

CLIP = """\
import torch

def train_step(model, batch, optimizer):
    try:
        loss = model(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        optimizer.step()
        return loss.item()
    except RuntimeError:
        optimizer.zero_grad()
        return 0.0
"""

RAISE = """\
import torch

def train_step(model, batch, optimizer):
    try:
        loss = model(batch)
        if torch.isnan(loss):
            raise ValueError("nan loss")
        loss.backward()
        optimizer.step()
        return loss.item()
    except Exception:
        return None
"""

CHECK = """\
from nozero import check_finite

def train_step(model, batch, optimizer, step):
    try:
        loss = model(batch)
        loss.backward()
        check_finite(step, loss, None)
        optimizer.step()
    except Exception as err:
        print(err)
        return
"""

INVALID = {
    "clip_grad_norm_ raising": (CLIP, 10),
    "a raise": (RAISE, 11),
    "check_finite": (CHECK, 9),
}

VALID = {
    "the handler re-raises": CLIP.replace("        return 0.0\n", "        raise\n"),
    "no finiteness check in the try (out of memory)": CLIP.replace(", error_if_nonfinite=True", ""),
    "the handler returns the step's own result": RAISE.replace(
        "        return None\n", "        return loss_so_far\n"
    ),
}


def _found(source: str, shortcuts: bool) -> list[tuple[int, str, str]]:
    findings = lint_source(textwrap.dedent(source), "step.py", shortcuts=shortcuts)
    return [(f.line, f.code, f.message) for f in findings]


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("name", sorted(INVALID))
def test_a_broad_except_returning_a_constant_swallows_the_check(name: str, shortcuts: bool):
    source, line = INVALID[name]
    [(found_line, code, message)] = _found(source, shortcuts)
    assert (found_line, code) == (line, "NZ301")
    assert "caught" in message


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("name", sorted(VALID))
def test_its_look_alikes_are_no_swallow(name: str, shortcuts: bool):
    # (``error_if_nonfinite=False`` is NZ404's own finding, not a swallow)
    assert [
        (line, code) for line, code, _ in _found(VALID[name], shortcuts) if code != "NZ404"
    ] == []


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
def test_a_step_helper_catching_any_error_swallows_whatever_raises_in_it(shortcuts: bool):
    # The clip no longer raises, but the step helper still hands back 0.0 for any
    # ``RuntimeError``: nozero's own guard and torch's anomaly mode raise one, and the
    # loop calling the step goes on, as it would from the same handler in the loop itself.
    source = CLIP.replace("error_if_nonfinite=True", "error_if_nonfinite=False")
    found = _found(source, shortcuts)
    assert [(line, code) for line, code, _ in found] == [(7, "NZ404"), (10, "NZ301")]
    assert "any error of the training step" in found[1][2]
