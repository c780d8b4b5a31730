"""Shapes the fourth held-out sample showed: a project's own exception named for a NaN,
raised in one module and caught in another by ``except`` or by a retry helper that runs
the step again (NZ301), and a non-finite loss term left out of a sum, which is reported as
a term, not as dropped samples (NZ107)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from nozero.lint import vocab
from nozero.lint.engine import lint_source

from .conftest import write


def findings(source: str, path: str = "train.py") -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.message) for f in lint_source(textwrap.dedent(source), path)]


# ---- a retry of a non-finite failure, in each library's style -------------------------
TORCH_RETRY_CALL = """\
from retry.api import retry_call
from .model import Trainer, NanException

def main(steps):
    trainer = Trainer()
    while trainer.steps < steps:
        retry_call(trainer.train, tries=3, exceptions=NanException)
"""

JAX_TENACITY = """\
import jax
import tenacity

jax.config.update("jax_debug_nans", True)

@tenacity.retry(
    stop=tenacity.stop_after_attempt(3),
    retry=tenacity.retry_if_exception_type(FloatingPointError),
)
def train_step(state, batch):
    grads = jax.grad(loss_fn)(state.params, batch)
    return state.apply_gradients(grads=grads)
"""

KERAS_BACKOFF = """\
import backoff
from .errors import NonFiniteLossError

@backoff.on_exception(backoff.expo, NonFiniteLossError, max_tries=5)
def fit_batch(model, x, y):
    loss = model.train_on_batch(x, y)
    return loss
"""

LIGHTNING_EXCEPT = """\
from .callbacks import LossIsNaNError

def run(trainer, module, loaders):
    for loader in loaders:
        try:
            trainer.fit(module, loader)
        except LossIsNaNError:
            continue
"""

# a plain name, caught around a call that runs training
HF_EXCEPT = """\
from .guards import NanException

def run(trainer, seeds):
    for seed in seeds:
        try:
            trainer.train(resume_from_checkpoint=True)
        except NanException:
            trainer.args.seed = seed
"""


@pytest.mark.parametrize(
    ("source", "line", "named"),
    [
        (TORCH_RETRY_CALL, 7, "NanException"),
        (JAX_TENACITY, 8, "FloatingPointError"),
        (KERAS_BACKOFF, 4, "NonFiniteLossError"),
        (LIGHTNING_EXCEPT, 7, "LossIsNaNError"),
        (HF_EXCEPT, 7, "NanException"),
    ],
    ids=["torch-retry_call", "jax-tenacity", "keras-backoff", "lightning-except", "hf-except"],
)
def test_a_caught_or_retried_nonfinite_failure_is_a_swallow(source, line, named):
    found = findings(source)
    assert [(n, code) for n, code, _ in found] == [(line, "NZ301")], found
    assert named in found[0][2]


# ---- look-alikes: retries of other failures, a failure re-raised, a test ---------------
RETRY_NETWORK = """\
from retry.api import retry_call
import tenacity

def save(state, path):
    retry_call(upload_checkpoint, fargs=[state, path], tries=3, exceptions=ConnectionError)

@tenacity.retry(retry=tenacity.retry_if_exception_type((IOError, TimeoutError)))
def train_step(model, optimizer, batch):
    loss = model(batch)
    loss.backward()
    optimizer.step()
"""

RE_RAISED = """\
from .model import NanException

def main(trainer):
    try:
        trainer.train()
    except NanException:
        trainer.save_debug_state()
        raise
"""

# a plain ``NanException`` raised while reading records: dropping the record is the
# loader's business, and retrying a read is no training step
LOADING = """\
from .records import NanException, parse

def load(rows):
    kept = []
    for row in rows:
        try:
            kept.append(parse(row))
        except NanException:
            continue
    return kept

def read_shard(path):
    return retry_call(download_shard, fargs=[path], tries=3, exceptions=NanException)
"""

IN_A_TEST = """\
from retry.api import retry_call
from mypkg.model import NanException

def test_training_recovers(trainer):
    retry_call(trainer.train, tries=3, exceptions=NanException)
"""


@pytest.mark.parametrize(
    ("source", "path"),
    [
        (RETRY_NETWORK, "train.py"),
        (RE_RAISED, "train.py"),
        (LOADING, "data.py"),
        (IN_A_TEST, "tests/test_train.py"),
    ],
    ids=["network-retry", "re-raised", "data-loading", "test-module"],
)
def test_look_alikes_are_not_reported(source, path):
    assert findings(source, path) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NanException", True),
        ("LossIsNaNError", True),
        ("NonFiniteGradError", True),
        ("InfOrNanError", True),
        ("FinanceError", False),  # "nan" inside a word
        ("InfoError", False),
        ("NanValue", False),  # not an exception's name
        ("nan_error", False),  # a variable, not a class
        ("TrainingDivergedError", False),  # a divergence may be finite
    ],
)
def test_exception_names_read_as_nonfinite(name, expected):
    assert vocab.names_nonfinite_exception(name) is expected


# ---- across modules: raised in one, retried in another --------------------------------
MODEL = """\
import torch

class NanException(Exception):
    pass

class Trainer:
    def train(self):
        loss = self.step()
        if torch.isnan(loss):
            self.load(self.checkpoint)
            raise NanException
"""

CLI = """\
from retry.api import retry_call
from gan.model import Trainer, NanException

def main(steps):
    trainer = Trainer()
    while trainer.steps < steps:
        retry_call(trainer.train, tries=3, exceptions=NanException)
"""

FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+):\d+: (?P<code>NZ\d+) ")


def _found(out: str, root: Path) -> set[tuple[str, int, str]]:
    found = set()
    for line in out.splitlines():
        match = FINDING.match(line)
        if match:
            path = Path(match["path"]).resolve().relative_to(root.resolve()).as_posix()
            found.add((path, int(match["line"]), match["code"]))
    return found


def test_a_retry_in_another_module_is_found_alone_and_in_the_tree(lint, tmp_path):
    root = tmp_path / "project"
    write(root / "pyproject.toml", "[project]\nname = 'gan'\n")
    write(root / "gan" / "__init__.py", "")
    write(root / "gan" / "model.py", MODEL)
    write(root / "gan" / "cli.py", CLI)
    expected = {("gan/cli.py", 7, "NZ301")}
    cache = str(tmp_path / "cache")
    assert _found(lint(str(root), "--no-cache").out, root) == expected
    assert _found(lint(str(root / "gan" / "cli.py"), "--no-cache").out, root) == expected
    assert _found(lint(str(root), "--cache-dir", cache).out, root) == expected
    assert _found(lint(str(root / "gan" / "cli.py"), "--cache-dir", cache).out, root) == expected


# ---- a term left out of a sum is a term ----------------------------------------------
TERM = """\
import torch

def generator_step(self, batch):
    gen_loss = self.adversarial_loss(batch)
    pl_loss = self.path_length_penalty(batch)
    if not torch.isnan(pl_loss):
        gen_loss = gen_loss + pl_loss
    gen_loss.backward()
    self.g_opt.step()
"""

GATHERED = """\
import torch

def epoch(model, optimizer, loader):
    losses = []
    for batch in loader:
        loss = model(batch)
        if not torch.isnan(loss):
            losses.append(loss)
    total = torch.stack(losses).mean()
    total.backward()
    optimizer.step()
"""


def test_a_term_left_out_of_a_sum_is_reported_as_a_term():
    (line, code, message), *rest = findings(TERM)
    assert (line, code, rest) == (6, "NZ107", [])
    assert "a non-finite term is left out of the sum here" in message
    assert "samples" not in message.split("(", 1)[1]


def test_losses_gathered_into_a_list_are_still_dropped_samples():
    found = findings(GATHERED)
    assert [(line, code) for line, code, _ in found] == [(7, "NZ107")], found
    assert "the non-finite samples are dropped here" in found[0][2]
