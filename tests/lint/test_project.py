"""Project-wide facts: a switch defined in one module and turned on in another, and
helpers with plain names imported from another module of the same project.

Each case is a small multi-module project written as real files (with a
``pyproject.toml`` marking its root) and linted with the real command. Every finding of
the case is listed: the reaction where the switch is defined is reported as before, and
the switch turned on elsewhere is reported AT THE TURNING-ON LINE. Look-alikes must stay
clean. The findings are the same for the whole tree and for each file alone, with and
without the cache.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from nozero.lint import project as project_module

from .conftest import BAD_LINE, BAD_SOURCE, GOOD_SOURCE, run_console_script, write

FINDING = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):\d+: (?P<code>NZ\d+) (?P<message>.*)$")


@dataclass(frozen=True)
class Project:
    name: str
    files: dict[str, str]
    expected: frozenset[tuple[str, int, str]]  # (path, line, code)


def project(name: str, files: dict[str, str], *expected: tuple[str, int, str]) -> Project:
    return Project(
        name, {p: textwrap.dedent(text) for p, text in files.items()}, frozenset(expected)
    )


TORCH_FIT = """\
    import torch

    def fit(model, loader, optimizer, skip_nan_batches=False):
        for batch in loader:
            loss = model(batch)
            if skip_nan_batches and torch.isnan(loss):
                continue
            loss.backward()
            optimizer.step()
    """

# A plain-named finiteness test, and a loop that skips the step on an imported one.
BAD_CHECK = """\
    import torch

    def bad(value):
        return not torch.isfinite(value).all()
    """
SKIP_ON = """\
    {imported}

    def run(model, loader, optimizer):
        for batch in loader:
            loss = model(batch)
            if {test}(loss):
                continue
            loss.backward()
            optimizer.step()
    """

TORCH_TRAINER = """\
    import torch

    class Trainer:
        def __init__(self, model, skip_bad_steps=False, config=None):
            self.model = model
            self.skip_bad = skip_bad_steps
            self.config = config

        def step(self, batch):
            loss = self.model(batch)
            if self.skip_bad and not torch.isfinite(loss):
                return None
            loss.backward()
            self.optimizer.step()
            return loss
    """

TORCH_CONFIG_GATE = """\
    import torch

    def train_step(model, batch, optimizer, cfg):
        loss = model(batch)
        loss.backward()
        if cfg.get("zero_nan_grads") and torch.isnan(loss):
            optimizer.zero_grad()
        optimizer.step()
    """

JAX_STEP = """\
    import jax
    import jax.numpy as jnp

    def train_step(params, opt_state, batch, config):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        if config.skip_nonfinite_updates and not jnp.isfinite(loss):
            return params, opt_state
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state
    """

CASES = [
    project(
        "torch: a keyword of an imported function",
        {
            "trainer.py": TORCH_FIT,
            "train.py": """\
                from trainer import fit

                def main(model, loader, optimizer):
                    fit(model, loader, optimizer,
                        skip_nan_batches=True)
                """,
        },
        ("trainer.py", 7, "NZ201"),
        ("train.py", 5, "NZ201"),
    ),
    project(
        "torch: a class's __init__ switch, positional, through a package",
        {
            "nets/__init__.py": "",
            "nets/engine.py": TORCH_TRAINER,
            "scripts/run.py": """\
                from nets.engine import Trainer

                trainer = Trainer(build_model(), True)
                """,
        },
        ("nets/engine.py", 12, "NZ201"),
        ("scripts/run.py", 3, "NZ201"),
    ),
    project(
        "torch: a module imported under another name, relative import",
        {
            "pkg/__init__.py": "",
            "pkg/loop.py": TORCH_FIT,
            "pkg/main.py": """\
                from . import loop as training

                def run(model, loader, optimizer):
                    training.fit(model, loader, optimizer, skip_nan_batches=1)
                """,
        },
        ("pkg/loop.py", 7, "NZ201"),
        ("pkg/main.py", 4, "NZ201"),
    ),
    project(
        "config module: a dict entry and a dict() keyword",
        {
            "src/proj/step.py": TORCH_CONFIG_GATE,
            "configs/default.py": """\
                LR = 3e-4
                CONFIG = {
                    "lr": LR,
                    "zero_nan_grads": True,
                }
                SMALL = dict(lr=1e-3, zero_nan_grads=True)
                """,
        },
        ("src/proj/step.py", 7, "NZ201"),
        ("configs/default.py", 4, "NZ201"),
        ("configs/default.py", 6, "NZ201"),
    ),
    project(
        "JAX: a config attribute, a dataclass default and an assignment",
        {
            "jaxtrain/step.py": JAX_STEP,
            "jaxtrain/config.py": """\
                import dataclasses

                @dataclasses.dataclass
                class Config:
                    learning_rate: float = 1e-3
                    skip_nonfinite_updates: bool = True

                def debug_config():
                    config = Config()
                    config.skip_nonfinite_updates = True
                    return config
                """,
        },
        ("jaxtrain/step.py", 7, "NZ201"),
        ("jaxtrain/config.py", 6, "NZ201"),
        ("jaxtrain/config.py", 10, "NZ201"),
    ),
    project(
        "a finiteness test with a plain name, imported",
        {
            "common/__init__.py": "",
            "common/checks.py": BAD_CHECK,
            "train.py": SKIP_ON.format(imported="from common.checks import bad", test="bad"),
        },
        ("train.py", 7, "NZ201"),
    ),
    project(
        "a cleaning helper with a plain name, imported",
        {
            "utils.py": """\
                import torch

                def fix(values):
                    return torch.where(torch.isfinite(values), values, torch.zeros_like(values))
                """,
            "train.py": """\
                from utils import fix

                def run(model, batch, optimizer):
                    loss = model(batch)
                    loss.backward()
                    for p in model.parameters():
                        p.grad = fix(p.grad)
                    optimizer.step()
                """,
        },
        ("train.py", 7, "NZ101"),
    ),
    project(
        "a method's keyword, matched by the method's name",
        {
            "lib/runner.py": """\
                import torch

                class Runner:
                    def fit(self, loader, skip_nonfinite_loss=False):
                        for batch in loader:
                            loss = self.model(batch)
                            if skip_nonfinite_loss and not torch.isfinite(loss):
                                continue
                            loss.backward()
                            self.optimizer.step()
                """,
            "main.py": """\
                def main(runner, loader):
                    runner.fit(loader, skip_nonfinite_loss=True)
                """,
        },
        ("lib/runner.py", 8, "NZ201"),
        ("main.py", 2, "NZ201"),
    ),
    project(
        "a finiteness test handed on by a package's __init__",
        {
            "common/__init__.py": "from .checks import bad as is_bad\n",
            "common/checks.py": BAD_CHECK,
            "train.py": SKIP_ON.format(imported="from common import is_bad", test="is_bad"),
        },
        ("train.py", 7, "NZ201"),
    ),
    project(
        "a switch handed on by nested packages' __init__ modules",
        {
            "lib/__init__.py": "from lib.training import fit\n",
            "lib/training/__init__.py": "from .loop import fit\n",
            "lib/training/loop.py": TORCH_FIT,
            "main.py": """\
                from lib import fit

                def main(model, loader, optimizer):
                    fit(model, loader, optimizer, skip_nan_batches=True)
                """,
        },
        ("lib/training/loop.py", 7, "NZ201"),
        ("main.py", 4, "NZ201"),
    ),
]

LOOK_ALIKES = [
    project(
        "a switch turned off, and a strict switch that raises",
        {
            "trainer.py": """\
                import torch

                def fit(model, loader, optimizer, strict_nan_check=False):
                    for batch in loader:
                        loss = model(batch)
                        if strict_nan_check and torch.isnan(loss):
                            raise FloatingPointError("nan loss")
                        loss.backward()
                        optimizer.step()
                """,
            "train.py": """\
                from trainer import fit

                fit(model, loader, optimizer, strict_nan_check=True)
                CONFIG = {"strict_nan_check": True}
                """,
        },
    ),
    project(
        "an imported test whose answer stops training",
        {
            "checks.py": """\
                import torch

                def bad(value):
                    return not torch.isfinite(value).all()
                """,
            "train.py": """\
                from checks import bad

                def run(model, loader, optimizer):
                    for batch in loader:
                        loss = model(batch)
                        if bad(loss):
                            raise FloatingPointError(f"non-finite loss {loss}")
                        loss.backward()
                        optimizer.step()
                """,
        },
    ),
    project(
        "an imported helper that cleans nothing, and one that cleans the inputs",
        {
            "utils.py": """\
                import torch

                def fix(values):
                    return values * 2

                def clean_inputs(x):
                    return torch.nan_to_num(x)
                """,
            "train.py": """\
                from utils import fix, clean_inputs

                def run(model, batch, optimizer):
                    x = clean_inputs(batch.x)
                    loss = model(x)
                    loss.backward()
                    for p in model.parameters():
                        p.grad = fix(p.grad)
                    optimizer.step()
                """,
        },
    ),
    project(
        "a switch turned on in a test module, and a same-named key of another project",
        {
            "trainer.py": TORCH_FIT,
            "tests/test_trainer.py": """\
                from trainer import fit

                def test_fit_skips():
                    fit(model, loader, optimizer, skip_nan_batches=True)
                """,
        },
        ("trainer.py", 7, "NZ201"),
    ),
]


LOOK_ALIKES.append(
    project(
        "a value's own attribute gating a reaction is no switch",
        {
            "engine.py": """\
                import torch

                def drop_bad_grads(model):
                    for param in model.parameters():
                        if param.requires_grad and param.grad is not None:
                            if not torch.isfinite(param.grad).all():
                                param.grad = None
                """,
            "model.py": """\
                def unfreeze(encoder):
                    for param in encoder.parameters():
                        param.requires_grad = True
                """,
        },
        ("engine.py", 7, "NZ201"),
    )
)

LOOK_ALIKES.append(
    project(
        "a setting holding the whole finiteness decision chooses stepping, not a skip",
        {
            "step_factory.py": """\
                import mindspore as ms
                from mindspore.amp import all_finite

                def create_step(grad_fn, optimizer, overflow_still_update=False):
                    def train_step(x, label, optimizer_update=True):
                        loss, grads = grad_fn(x, label)
                        finite = all_finite(grads)
                        if optimizer_update:
                            if finite:
                                loss = ms.ops.depend(loss, optimizer(grads))
                            else:
                                if overflow_still_update:
                                    loss = ms.ops.depend(loss, optimizer(grads))
                        return loss, finite
                    return train_step
                """,
            "train.py": """\
                from step_factory import create_step

                def train(grad_fn, optimizer, loader, accumulate):
                    step = create_step(grad_fn, optimizer)
                    for i, (x, y) in enumerate(loader):
                        step(x, y, optimizer_update=(i + 1) % accumulate == 0)
                """,
        },
        ("step_factory.py", 13, "NZ106"),
    )
)
CASES.append(
    project(
        "a setting around a one-way finiteness check turns the skip on",
        {
            "engine.py": """\
                import torch

                def fit(model, loader, optimizer, skip_nan=False):
                    for batch in loader:
                        loss = model(batch)
                        if skip_nan:
                            if not torch.isfinite(loss):
                                continue
                        loss.backward()
                        optimizer.step()
                """,
            "run.py": """\
                from engine import fit

                fit(model, loader, optimizer, skip_nan=True)
                """,
        },
        ("run.py", 3, "NZ201"),
        ("engine.py", 8, "NZ201"),
    )
)

CASES.append(
    project(
        "a trainer's switch read in a disjunction whose else branch skips",
        {
            "trainer.py": """\
                import torch

                class Trainer:
                    def __init__(self, model, optimizer, skip_nan_loss=False, nan_tolerance=5):
                        self.model = model
                        self.optimizer = optimizer
                        self.skip_nan_loss = skip_nan_loss
                        self.nan_tolerance = nan_tolerance

                    def fit_epoch(self, loader):
                        nan_count = 0
                        for batch in loader:
                            loss = self.model(batch)
                            if not self.skip_nan_loss or torch.isfinite(loss):
                                nan_count = 0
                                loss.backward()
                                self.optimizer.step()
                            else:
                                nan_count += 1
                                if nan_count > self.nan_tolerance:
                                    raise RuntimeError("too many non-finite losses")
                """,
            "train.py": """\
                from trainer import Trainer

                trainer = Trainer(model, optimizer, skip_nan_loss=True)
                """,
        },
        ("trainer.py", 14, "NZ201"),
        ("train.py", 3, "NZ201"),
    )
)

LOOK_ALIKES.append(
    project(
        "a setting choosing between two branches that both zero NaN gradients",
        {
            "train.py": """\
                import torch

                def train(model, loader, optimizer, scaler, use_amp=True):
                    for batch in loader:
                        loss = model(batch)
                        if use_amp:
                            scaler.scale(loss).backward()
                            scaler.unscale_(optimizer)
                            for p in model.parameters():
                                if p.grad is not None and torch.isnan(p.grad).any():
                                    p.grad.zero_()
                            scaler.step(optimizer)
                            scaler.update()
                        else:
                            loss.backward()
                            for p in model.parameters():
                                if p.grad is not None and torch.isnan(p.grad).any():
                                    p.grad.zero_()
                            optimizer.step()
                """,
        },
        ("train.py", 11, "NZ201"),
        ("train.py", 18, "NZ201"),
    )
)

CASES.append(
    project(
        "a switch gating a log line and a roll-back is reported as turning the roll-back on",
        {
            "engine.py": """\
                import numpy as np

                def fit(state, batches, train_step, mngr, restart_by_nan=False):
                    for batch in batches:
                        state, metrics = train_step(state, batch)
                        if np.isnan(metrics["loss"]) and restart_by_nan:
                            if np.isnan(metrics["loss"]):
                                print("NaN loss: reloading the last checkpoint")
                            restored = mngr.restore(mngr.best_step())["state"]
                            state = state.replace(params=restored["params"])
                    return state
                """,
            "run.py": """\
                from engine import fit

                fit(state, batches, train_step, mngr, restart_by_nan=True)
                """,
        },
        ("engine.py", 9, "NZ410"),
        ("run.py", 3, "NZ410"),
    )
)


CASES.append(
    project(
        "a switch named for NaNs, handed on through a wrapper's **kwargs, a config dict",
        {
            "trainer.py": TORCH_FIT,
            "coach.py": """\
                from trainer import fit

                class Coach:
                    def run(self, model, loader, optimizer, **kwargs):
                        fit(model, loader, optimizer, **kwargs)
                """,
            "train.py": """\
                from coach import Coach

                coach = Coach()
                coach.run(model, loader, optimizer, skip_nan_batches=True)
                coach.run(model, loader, optimizer, skip_nan_batches=False)
                settings = {"skip_nan_batches": True, "log_every": 10}
                coach.run(model, loader, optimizer, **settings)
                """,
        },
        ("trainer.py", 7, "NZ201"),
        ("train.py", 4, "NZ201"),
        ("train.py", 6, "NZ201"),
    )
)


# Methods inherited from a class of another module: a mixin that cleans logits, a base
# trainer whose finiteness test the subclass skips on. A class that only holds such a
# base (composition, not inheritance) calls nothing of it through ``self``.
MIXIN = """\
    import torch

    class AmpMixin:
        @staticmethod
        def _safe_logits(x, name):
            x = torch.clamp(x, min=-1e4, max=1e4)
            return torch.nan_to_num(x, nan=0.0, posinf=1e4, neginf=-1e4)
    """
BASE_TRAINER = """\
    import torch

    class BaseTrainer:
        def _bad(self, value):
            return not torch.isfinite(value).all()
    """
CASES.append(
    project(
        "torch: a cleaning method inherited from a mixin in another module",
        {
            "mixins/__init__.py": "",
            "mixins/amp.py": MIXIN,
            "distill.py": """\
                from mixins.amp import AmpMixin

                class Distiller(AmpMixin):
                    def step(self, batch):
                        logits = self.student(batch).logits
                        logits = self._safe_logits(logits, "student")
                        loss = self.criterion(logits, batch.labels)
                        loss.backward()
                        self.optimizer.step()
                """,
        },
        ("distill.py", 6, "NZ101"),
    )
)
CASES.append(
    project(
        "torch: a base trainer's finiteness test, skipped on in a subclass's loop",
        {
            "base.py": BASE_TRAINER,
            "trainer.py": """\
                from base import BaseTrainer

                class Trainer(BaseTrainer):
                    def fit(self, loader):
                        for batch in loader:
                            loss = self.model(batch)
                            if self._bad(loss):
                                continue
                            loss.backward()
                            self.optimizer.step()
                """,
        },
        ("trainer.py", 8, "NZ201"),
    )
)
CASES.append(
    project(
        "TF: a cleaning helper in another module, written in named steps, on the loss",
        {
            "utils.py": """\
                import tensorflow as tf

                def mask_nans(x):
                    x_zeros = tf.zeros_like(x)
                    x_mask = tf.is_finite(x)
                    return tf.where(x_mask, x, x_zeros)
                """,
            "losses.py": """\
                import tensorflow as tf
                from utils import mask_nans

                def ctc_loss(logits, labels, lengths, grads):
                    loss = mask_nans(tf.nn.ctc_loss(labels, logits, lengths, None))
                    for g in grads:
                        tf.summary.histogram("gradients", mask_nans(g))
                    return tf.reduce_mean(loss)
                """,
        },
        ("losses.py", 5, "NZ101"),
    )
)
LOOK_ALIKES.append(
    project(
        "a class holding another module's mixin, not inheriting it, calls its own method",
        {
            "mixins.py": MIXIN,
            "distill.py": """\
                from mixins import AmpMixin

                class Distiller:
                    def __init__(self):
                        self.amp = AmpMixin()

                    def step(self, batch):
                        logits = self.student(batch).logits
                        logits = self._safe_logits(logits, "student")
                        loss = self.criterion(logits, batch.labels)
                        loss.backward()
                """,
        },
    )
)


def _write_project(root: Path, case: Project) -> None:
    write(root / "pyproject.toml", "[project]\nname = 'case'\n")
    for path, text in case.files.items():
        write(root / path, text)


def _findings(out: str, root: Path) -> set[tuple[str, int, str]]:
    found = set()
    for line in out.splitlines():
        match = FINDING.match(line)
        assert match, line
        path = Path(match["path"]).resolve().relative_to(root.resolve()).as_posix()
        found.add((path, int(match["line"]), match["code"]))
    return found


@pytest.mark.parametrize("case", CASES + LOOK_ALIKES, ids=lambda c: c.name)
def test_every_case_is_found_at_the_turning_on_line(case, lint, tmp_path):
    root = tmp_path / "project"
    _write_project(root, case)
    tree = lint(str(root), "--no-cache")
    assert tree.code == (1 if case.expected else 0), tree.err
    assert _findings(tree.out, root) == case.expected


@pytest.mark.parametrize("case", CASES[:5] + CASES[6:7] + CASES[-3:], ids=lambda c: c.name)
def test_one_file_or_the_tree_with_or_without_the_cache_agree(case, lint, tmp_path):
    root = tmp_path / "project"
    _write_project(root, case)
    cache = str(tmp_path / "cache")
    expected = case.expected
    assert _findings(lint(str(root), "--no-cache").out, root) == expected
    for path in case.files:  # each file alone, as pre-commit lints a changed file
        alone = {f for f in expected if f[0] == path}
        assert _findings(lint(str(root / path), "--no-cache").out, root) == alone
        assert _findings(lint(str(root / path), "--cache-dir", cache).out, root) == alone
    assert _findings(lint(str(root), "--cache-dir", cache).out, root) == expected  # warm
    for path in case.files:
        alone = {f for f in expected if f[0] == path}
        assert _findings(lint(str(root / path), "--cache-dir", cache).out, root) == alone


@pytest.mark.parametrize("case", CASES[:5], ids=lambda c: c.name)
def test_a_tree_with_no_project_marker_is_its_own_project(case, lint, tmp_path):
    """A tarball's tree or a folder of scripts (no pyproject.toml, setup.py or .git):
    the directory named on the command line is the project, and a file named alone
    sees the modules beside it."""
    root = tmp_path / "unpacked"
    for path, text in case.files.items():
        write(root / path, text)
    assert project_module.project_root(root / "train.py") is None
    assert _findings(lint(str(root), "--no-cache").out, root) == case.expected
    for path in case.files:
        if "/" not in path:  # its imports resolve from its own directory
            alone = {f for f in case.expected if f[0] == path}
            assert _findings(lint(str(root / path), "--no-cache").out, root) == alone


def test_a_changed_module_changes_what_its_importers_are_told(lint, tmp_path):
    """The switch's module edited so that the switch raises instead: the warm cache must
    not keep reporting the call that turns it on."""
    root = tmp_path / "project"
    _write_project(root, CASES[0])
    cache = str(tmp_path / "cache")
    first = lint(str(root / "train.py"), "--cache-dir", cache)
    assert _findings(first.out, root) == {("train.py", 5, "NZ201")}
    trainer = root / "trainer.py"
    trainer.write_text(trainer.read_text().replace("continue", "raise FloatingPointError"))
    again = lint(str(root / "train.py"), "--cache-dir", cache)
    assert again.code == 0 and _findings(again.out, root) == set()
    assert lint(str(root), "--cache-dir", cache).code == 0


def test_an_init_that_stops_handing_a_helper_on_changes_the_warm_findings(lint, tmp_path):
    """The package's ``__init__`` edited to hand on a clean function of the same name: the
    warm cache must not keep reporting the importer."""
    case = next(c for c in CASES if c.name.startswith("a finiteness test handed on"))
    root = tmp_path / "project"
    _write_project(root, case)
    cache = str(tmp_path / "cache")
    assert _findings(lint(str(root), "--cache-dir", cache).out, root) == {("train.py", 7, "NZ201")}
    (root / "common" / "clean.py").write_text("def bad(value):\n    return False\n")
    (root / "common" / "__init__.py").write_text("from .clean import bad as is_bad\n")
    again = lint(str(root), "--cache-dir", cache)
    assert again.code == 0 and _findings(again.out, root) == set()


def test_the_route_names_the_switch_and_the_reaction(lint, tmp_path):
    root = tmp_path / "project"
    _write_project(root, CASES[3])
    result = lint(str(root / "configs" / "default.py"), "--no-cache")
    messages = [FINDING.match(line)["message"] for line in result.lines()]
    assert messages and all(
        "zero_nan_grads turned on here" in m and "src/proj/step.py:7" in m for m in messages
    ), messages


def test_a_module_added_after_a_warm_run_is_summarised(lint, tmp_path):
    root = tmp_path / "project"
    _write_project(root, CASES[0])
    trainer = root / "trainer.py"
    source = trainer.read_text()
    trainer.unlink()
    cache = str(tmp_path / "cache")
    assert _findings(lint(str(root / "train.py"), "--cache-dir", cache).out, root) == set()
    write(root / "trainer.py", source)  # a new module: its directory changes
    again = lint(str(root / "train.py"), "--cache-dir", cache)
    assert _findings(again.out, root) == {("train.py", 5, "NZ201")}


def test_a_models_mode_is_no_switch(lint, tmp_path):
    """``is_training`` is set wherever a model runs: a reaction gated on it is reported
    where it is, and setting the mode elsewhere turns nothing on."""
    root = tmp_path / "project"
    case = project(
        "mode",
        {
            "step.py": TORCH_CONFIG_GATE.replace('cfg.get("zero_nan_grads")', "cfg.is_training"),
            "run.py": "CONFIG = dict(is_training=True)\n",
        },
    )
    _write_project(root, case)
    assert _findings(lint(str(root), "--no-cache").out, root) == {("step.py", 7, "NZ201")}


# Cases whose files and switch names do not meet, linted as one project: more modules
# than the runner lints in one process, so the workers summarise, screen and lint them.
MERGED = [CASES[i] for i in (1, 2, 3, 4, 5, 7)]


def test_the_workers_and_one_process_agree(tmp_path):
    """The whole tree on two worker processes (the summaries, the imports and the lint
    without a view in one pass; the files that see their project linted again), on one
    process, and each file with findings alone: the same findings, each case's own."""
    root = tmp_path / "project"
    for case in MERGED:
        _write_project(root, case)
    write(root / "plain.py", "def add(a, b):\n    return a + b\n")  # no trigger text
    expected = set().union(*(case.expected for case in MERGED))
    for jobs in ("2", "1"):
        tree = run_console_script("lint", "--no-cache", "--jobs", jobs, str(root), cwd=root)
        assert tree.code == 1, tree.err
        assert _findings(tree.out, root) == expected, jobs
    for path in sorted({f[0] for f in expected}) + ["plain.py"]:
        alone = run_console_script("lint", "--no-cache", "--jobs", "2", str(root / path), cwd=root)
        assert _findings(alone.out, root) == {f for f in expected if f[0] == path}, path


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "import a.b as m\nfrom . import (x,\n    y as z)\n",
            [("m", "a.b", None), ("x", ".", "x"), ("x", ".x", None), ("z", ".", "y")]
            + [("z", ".y", None)],
        ),
        # a parenthesis in a comment takes the next line in, and then nothing parses
        ("def f():\n    from ..pkg import h  # (\n    )\n", []),
        ("def f():\n    from ..pkg import h\n", [("h", "..pkg", "h"), ("h", "..pkg.h", None)]),
        ("import q \\\n  , r\nx = 'import s'\n", [("q", "q", None), ("r", "r", None)]),
        # one statement that does not parse alone is skipped, the others still read
        ("import a; s = '''\nimport b  # '''\nimport c\n", [("b", "b", None), ("c", "c", None)]),
        ("from p import *\nimportant = 1\n", []),
    ],
)
def test_import_statements_are_read_one_by_one(source, expected):
    from nozero.lint.project import import_bindings

    assert import_bindings(source) == expected


@pytest.mark.parametrize("case", CASES + LOOK_ALIKES, ids=lambda c: c.name)
def test_a_view_is_the_same_from_the_imports_read_beforehand(case, tmp_path):
    """The runner hands a view the import statements its workers read; the view must be
    the one the file's text alone gives."""
    from nozero.lint.project import Projects, import_bindings

    root = tmp_path / "project"
    _write_project(root, case)
    projects = Projects(None)
    for path in case.files:
        file = root / path
        project = projects.of(file)
        assert project is not None
        source = file.read_text()
        assert project.view(file, source, import_bindings(source)) == project.view(file, source)


def test_a_file_changed_after_its_project_was_read_is_read_again(lint, tmp_path, monkeypatch):
    """The runner lints the bytes its project summary was made from only while the file's
    size and mtime are unchanged; a file rewritten in between is read again."""
    root = tmp_path / "project"
    _write_project(root, CASES[0])
    step = root / "step.py"
    write(step, GOOD_SOURCE)
    original = project_module.Project.__init__

    def read_then_rewrite(self, *args, **kwargs):
        original(self, *args, **kwargs)
        step.write_text(BAD_SOURCE + "\n")  # another size, another mtime

    monkeypatch.setattr(project_module.Project, "__init__", read_then_rewrite)
    result = lint(str(root), "--no-cache", "--jobs", "1")
    assert ("step.py", BAD_LINE, "NZ101") in _findings(result.out, root)


@pytest.mark.parametrize("comment", ["# noqa: NZ101", "# NoQa: nz101", "# NOQA:NZ1"])
def test_a_suppression_in_a_module_without_trigger_text_is_still_checked(comment, lint, tmp_path):
    """The first pass screens each module for trigger text and for a suppression naming
    a nozero code, whatever its case: one that suppresses nothing is reported (NZ003),
    and a module with neither is not."""
    root = tmp_path / "project"
    write(root / "pyproject.toml", "")
    write(root / "util.py", f"def add(a, b):\n    return a + b  {comment}\n")
    write(root / "plain.py", "def add(a, b):\n    return a + b  # noqa: E501\n")
    result = lint("--no-cache", str(root))
    assert result.code == 1, result.err
    assert _findings(result.out, root) == {("util.py", 2, "NZ003")}
