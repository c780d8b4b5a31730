"""Reactions judged by what happens next: a flag or a ``return`` that ends the run is a
halt, not a skip; a ``raise`` or a finiteness ``assert`` caught by its own ``try`` (and
only counted), and ``detect_anomaly``'s error caught with ``continue``, are swallows; and
the messages say what the code does (a loss set to zero is not "gradients zeroed"; a
``continue`` after the update does not skip the step)."""

from __future__ import annotations

from nozero.lint.engine import lint_source

HALT_BY_FLAG = """\
import torch

def train(model, loader, optimizer, epochs):
    stop = False
    for epoch in range(epochs):
        for batch in loader:
            loss = model(batch)
            if torch.isnan(loss):
                stop = True
                break
            loss.backward()
            optimizer.step()
        if stop:
            break
"""

HALT_BY_RETURN = """\
import torch

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        if torch.isnan(loss):
            return
        loss.backward()
        optimizer.step()

def fit(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        if torch.isnan(loss):
            break
        loss.backward()
        optimizer.step()
    save(model)
"""

CAUGHT = """\
import torch

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        try:
            if torch.isnan(loss):
                raise ValueError("nan loss")
            loss.backward()
            optimizer.step()
        except ValueError:
            optimizer.zero_grad()
            continue

def train2(model, loader, optimizer):
    fails = 0
    for batch in loader:
        loss = model(batch)
        try:
            assert torch.isfinite(loss), "nan"
        except AssertionError:
            fails += 1
            if fails > 100:
                raise
            continue
        loss.backward()
        optimizer.step()

def train3(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        try:
            with torch.autograd.detect_anomaly():
                loss.backward()
        except RuntimeError:
            optimizer.zero_grad()
            continue
        optimizer.step()

def train4(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss = torch.clamp(loss, max=1e4)
        loss.backward()
        optimizer.step()

def train5(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        if torch.isnan(loss):
            loss = torch.zeros_like(loss)
        loss.backward()
        optimizer.step()

def train6(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if torch.isnan(loss):
            continue
        log(loss)
"""


INNER_SKIP = """\
import torch

def train(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for batch in loader:
            loss = model(batch)
            bad = torch.isnan(loss)
            if bad:
                continue
            loss.backward()
            optimizer.step()
"""


def _found(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in lint_source(source, "train.py")]


def test_a_stop_flag_read_by_the_training_loops_break_is_a_halt():
    assert _found(HALT_BY_FLAG) == []
    # a flag read by a continue of the batch loop skips that batch
    assert [(line, code) for line, code, _ in _found(INNER_SKIP)] == [(9, "NZ201")]


def test_a_return_from_the_training_function_is_a_halt():
    assert _found(HALT_BY_RETURN) == []
    # returning from a function that runs one epoch skips the rest of that epoch only
    one_round = HALT_BY_RETURN.replace(
        "def train(model, loader, optimizer):", "def train(model, loader, optimizer, epoch):"
    )
    assert [(line, code) for line, code, _ in _found(one_round)] == [(7, "NZ201")]


def test_failures_caught_by_their_own_try_are_swallowed():
    found = _found(CAUGHT)
    swallowed = {line: message for line, code, message in found if code == "NZ301"}
    assert sorted(swallowed) == [11, 21, 35]
    assert "caught by its own try" in swallowed[11]
    assert "finiteness assertion" in swallowed[21]
    assert "detect_anomaly" in swallowed[35]


def test_a_handler_that_always_raises_is_no_swallow():
    reraised = CAUGHT.replace(
        "            fails += 1\n            if fails > 100:\n                raise\n",
        "            raise\n",
    )
    assert 21 not in {line for line, code, _ in _found(reraised) if code == "NZ301"}


def test_the_messages_say_what_the_code_does():
    messages = {line: message for line, code, message in _found(CAUGHT) if code == "NZ201"}
    assert "the value is set to zero here" in messages[51]
    assert "gradients" not in messages[51]
    assert "the update was already applied" in messages[61]
    assert "the step is skipped" not in messages[61]


NOT_SIGNAL = """\
import torch

def normalise(self, values):
    for i in range(self.n_factors):
        degree = torch.clamp(values[:, i], min=1e-8)
        try:
            assert not torch.isnan(degree).any()
        except AssertionError:
            self.logger.info("degree", degree.min())
"""


def test_a_caught_assertion_about_no_training_signal_is_left_alone():
    assert _found(NOT_SIGNAL) == []
