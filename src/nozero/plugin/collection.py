"""The check items of ``pytest --nozero``: one set per trainer registration.

Loaded only when ``--nozero`` is given. For every registration of a trainer (a
``nozero_trainer`` fixture in a conftest, or a factory named by ``nozero_trainer`` in the
ini file / ``--nozero-trainer``) four items are added: ``nozero::halts[trainer]``,
``nozero::overflow[trainer]``, ``nozero::no_false_alarm[trainer]`` and
``nozero::never_continue[trainer]``. Their node ids work as command-line arguments.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nozero.plugin.checking import FIXTURE, run_check
from nozero.plugin.judges import CHECKS, Check
from nozero.plugin.options import Options
from nozero.plugin.registration import load_factory

MODULE = "nozero"
HOW_TO_REGISTER = (
    "--nozero found no trainer to test. Register one: a fixture named 'nozero_trainer' in a "
    "conftest.py returning nozero.testing.TrainerUnderTest (parametrize it for several), "
    "or the ini option 'nozero_trainer = pkg.module:factory' (one a line), or "
    "--nozero-trainer pkg.module:factory."
)


def _check_function(check: Check) -> Callable[..., None]:
    def check_test(nozero_trainer: Any, request: pytest.FixtureRequest) -> None:
        run_check(check, nozero_trainer, request)

    check_test.__name__ = check_test.__qualname__ = check.name
    check_test.__doc__ = check.promise
    return check_test


def _label_unparametrized(fixture_name: str) -> Callable[[pytest.Metafunc], None]:
    """Give a single, unparametrized trainer fixture a readable id (its function's name)."""

    def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
        metafunc.parametrize(FIXTURE, [None], ids=[fixture_name], indirect=True)

    return pytest_generate_tests


def _factory_fixture(factories: tuple[str, ...], rootdir: Path) -> Any:
    # Imported now, so a wrong name is a usage error before any test runs.
    loaded = {spec: load_factory(spec, rootdir) for spec in factories}

    @pytest.fixture(name=FIXTURE, params=factories, ids=list(factories))
    def trainer_from_factory(request: pytest.FixtureRequest) -> Any:
        return loaded[request.param]()

    return trainer_from_factory


class CheckModule(pytest.Module):
    """A virtual module holding the check functions for one trainer registration."""

    def __init__(self, *, namespace: types.ModuleType, **kwargs: Any) -> None:
        self._namespace = namespace
        super().__init__(**kwargs)

    @classmethod
    def for_parent(cls, parent: pytest.Collector, namespace: types.ModuleType) -> CheckModule:
        base = parent.nodeid
        nodeid = MODULE if base in ("", ".") else f"{base}/{MODULE}"
        path = parent.path / MODULE
        return cls.from_parent(parent, path=path, name=MODULE, nodeid=nodeid, namespace=namespace)

    def _getobj(self) -> types.ModuleType:
        return self._namespace

    def collect(self) -> Iterator[pytest.Item]:
        self.session._fixturemanager.parsefactories(self)
        for check in CHECKS:
            yield from self._genfunctions(check.name, getattr(self.obj, check.name))


def _namespace(**extra: Any) -> types.ModuleType:
    module = types.ModuleType("nozero_checks", "non-finite contract checks")
    for check in CHECKS:
        setattr(module, check.name, _check_function(check))
    for name, value in extra.items():
        setattr(module, name, value)
    return module


def _split_selectors(config: pytest.Config) -> tuple[list[str], list[str]]:
    """Command-line arguments naming check items (``[dir/]nozero::check[id]``), and the
    rest. The virtual ``nozero`` module is not a file, so pytest would refuse them."""
    selectors, others = [], []
    for arg in config.args:
        head, sep, _ = arg.partition("::")
        if sep and (head == MODULE or head.endswith("/" + MODULE)):
            selectors.append(arg)
        else:
            others.append(arg)
    return selectors, others


def _collection_root(selector: str, config: pytest.Config) -> list[str]:
    head = selector.partition("::")[0]
    folder = head[: -len(MODULE)].rstrip("/")
    if folder:
        return [str(config.rootpath / folder)]
    testpaths = config.getini("testpaths")
    return [str(config.rootpath / path) for path in testpaths] or [str(config.rootpath)]


class CheckCollection:
    """Adds the check items after normal collection (registered only with --nozero)."""

    def __init__(self, config: pytest.Config, options: Options) -> None:
        self.options = options
        self.rootdir = config.rootpath
        self.directories: list[pytest.Collector] = []
        self.labels: list[str] = []
        self.selectors, others = _split_selectors(config)
        self.other_args = bool(others)
        if self.selectors:  # collect the folders the selected items live in
            roots = [root for sel in self.selectors for root in _collection_root(sel, config)]
            config.args[:] = list(dict.fromkeys(others + roots))

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.Directory):
            self.directories.append(collector)

    def _fixture_registrations(self, session: pytest.Session) -> list[CheckModule]:
        """One module per node where a ``nozero_trainer`` fixture is defined (conftests)."""
        manager = session._fixturemanager
        modules = []
        for node in [session, *self.directories]:
            defs = manager.getfixturedefs(FIXTURE, node) or []
            above = manager.getfixturedefs(FIXTURE, node.parent) if node.parent else None
            if not defs or (above and defs[-1] is above[-1]):
                continue
            extra = {}
            if defs[-1].params is None:
                extra["pytest_generate_tests"] = _label_unparametrized(defs[-1].func.__name__)
            modules.append(CheckModule.for_parent(node, _namespace(**extra)))
        return modules

    def _selected(self, item: pytest.Item, ours: set[str]) -> bool:
        if item.nodeid not in ours:
            return self.other_args
        return any(
            item.nodeid == sel or item.nodeid.startswith(sel + "[") for sel in self.selectors
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        modules = self._fixture_registrations(session)
        if self.options.factories:
            fixture = _factory_fixture(self.options.factories, self.rootdir)
            modules.append(CheckModule.for_parent(session, _namespace(nozero_trainer=fixture)))
        # None means no such fixture anywhere (one outside this selection is not an error).
        if not modules and session._fixturemanager.getfixturedefs(FIXTURE, session) is None:
            raise pytest.UsageError(HOW_TO_REGISTER)
        added = [item for module in modules for item in session.genitems(module)]
        self.labels = sorted({item.nodeid.split("[", 1)[-1].rstrip("]") for item in added})
        items.extend(added)
        if self.selectors:
            ours = {item.nodeid for item in added}
            kept = [item for item in items if self._selected(item, ours)]
            dropped = [item for item in items if not self._selected(item, ours)]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
            items[:] = kept

    def pytest_report_collectionfinish(self) -> str:
        shown = ", ".join(f"[{label}]" for label in self.labels) or "none"
        count = len(self.labels)
        return f"nozero: {count} trainer{'' if count == 1 else 's'} registered: {shown}"
