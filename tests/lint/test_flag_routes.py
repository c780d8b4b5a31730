"""Finiteness facts that travel before training reacts to them: kept in a stats dict
(read by the same function or by another method of the class), returned through a
decorator's wrapper in place of the wrapped step's result, or passed as a rejection
function by a call in the same file. Logging the dict, a wrapper that raises, or a
predicate that tests something else, is no reaction."""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source

STATS = """\
import torch

def train(model, loader, optimizer):
    for batch in loader:
        stats = {}
        loss = model(batch)
        stats["nonfinite"] = not torch.isfinite(loss)
        log(stats)
        if stats["nonfinite"]:
            continue
        loss.backward()
        optimizer.step()
"""

STATS_ACROSS_METHODS = """\
import torch

class Trainer:
    def compute(self, batch):
        loss = self.model(batch)
        self.stats["bad_loss"] = bool(torch.isnan(loss))
        return loss

    def fit_batch(self, batch):
        loss = self.compute(batch)
        if self.stats["bad_loss"]:
            return None
        loss.backward()
        self.optimizer.step()
"""

DECORATOR = """\
import functools

import torch

def nan_guard(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        loss = fn(*args, **kwargs)
        if torch.isnan(loss):
            return None
        return loss

    return wrapper
"""

REJECT = """\
import torch

def train(model, loader, optimizer, reject=None):
    for batch in loader:
        loss = model(batch)
        if reject is not None and reject(loss):
            continue
        loss.backward()
        optimizer.step()

def main(model, loader, optimizer):
    train(model, loader, optimizer, reject=lambda l: not torch.isfinite(l))
"""

REJECT_BY_HELPER = """\
import torch

def has_nan(value):
    return torch.isnan(value).any()

def fit(model, loader, optimizer, skip_if):
    for batch in loader:
        loss = model(batch)
        if skip_if(loss):
            continue
        loss.backward()
        optimizer.step()

fit(net, data, opt, has_nan)
"""

INVALID = {
    "a rejection lambda passed by keyword": (REJECT, [(7, "NZ201")]),
    "a same-file helper passed by position": (REJECT_BY_HELPER, [(10, "NZ201")]),
    "a stats entry read by the loop": (STATS, [(10, "NZ201")]),
    "a stats entry read by another method": (STATS_ACROSS_METHODS, [(12, "NZ201")]),
    "a decorator returning None for the step": (DECORATOR, [(10, "NZ201")]),
    "a decorator returning zeros": (
        DECORATOR.replace("return None", "return torch.zeros_like(loss)"),
        [(10, "NZ201")],
    ),
}

VALID = {
    "a rejection function that tests something else": REJECT.replace(
        "lambda l: not torch.isfinite(l)", "lambda l: l.item() > 100.0"
    ),
    "a rejection function nobody here passes": REJECT.replace(
        "    train(model, loader, optimizer, reject=lambda l: not torch.isfinite(l))\n",
        "    train(model, loader, optimizer)\n",
    ),
    "a stats entry only logged": STATS.replace(
        '        if stats["nonfinite"]:\n            continue\n', ""
    ),
    "another entry of the dict read": STATS.replace('if stats["nonfinite"]:', 'if stats["empty"]:'),
    "a decorator that raises": DECORATOR.replace(
        "return None", 'raise FloatingPointError("nan loss")'
    ),
    "a wrapper that is no decorator's (nothing returns it)": DECORATOR.replace(
        "    return wrapper\n", "    register(wrapper)\n"
    ),
}


def _found(source: str, shortcuts: bool) -> list[tuple[int, str]]:
    findings = lint_source(textwrap.dedent(source), "train.py", shortcuts=shortcuts)
    return [(f.line, f.code) for f in findings]


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("name", sorted(INVALID))
def test_a_fact_carried_to_its_reaction_is_found(name: str, shortcuts: bool):
    source, expected = INVALID[name]
    assert _found(source, shortcuts) == expected


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("name", sorted(VALID))
def test_no_reaction_no_finding(name: str, shortcuts: bool):
    assert _found(VALID[name], shortcuts) == []


def test_the_message_names_the_entry():
    [finding] = lint_source(STATS, "train.py")
    assert "stats[nonfinite] set at line 7 from isfinite(loss)" in finding.message
