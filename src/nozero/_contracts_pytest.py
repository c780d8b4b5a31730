"""The contract items of ``pytest --nozero``: collection, fixtures and Hypothesis runs.

Loaded only when ``--nozero`` is given. For every registration of a trainer (a
``nozero_trainer`` fixture in a conftest, or a factory named by ``nozero_trainer`` in the
ini file / ``--nozero-trainer``) one set of items is added: ``nozero::halts[trainer]``,
``nozero::overflow[trainer]``, ``nozero::no_false_alarm[trainer]`` and
``nozero::never_continue[trainer]``.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from nozero._contracts import CONTRACTS, CleanCase, Contract, observe
from nozero.pytest_plugin import OPTIONS_KEY, ContractOptions
from nozero.testing import TrainerUnderTest

FIXTURE = "nozero_trainer"
HOW_TO_REGISTER = (
    "--nozero found no trainer to test. Register one: a fixture named 'nozero_trainer' in a "
    "conftest.py returning nozero.testing.TrainerUnderTest (parametrize it for several), "
    "or the ini option 'nozero_trainer = pkg.module:factory' (one a line), or "
    "--nozero-trainer pkg.module:factory."
)


class ContractViolation(AssertionError):
    """Raised inside the Hypothesis test so it shrinks; carries the case and the verdict."""

    def __init__(self, problem: str, case: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.case = case


def load_factory(spec: str) -> Callable[[], Any]:
    """Import ``pkg.module:attr.path``; errors name the ini option and the cause."""
    module_name, _, attr_path = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as err:
        message = f"nozero_trainer {spec!r}: cannot import {module_name}: {err!r}"
        raise pytest.UsageError(message) from err
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            message = f"nozero_trainer {spec!r}: {module_name} has no {attr_path}"
            raise pytest.UsageError(message) from None
    if not callable(target):
        raise pytest.UsageError(f"nozero_trainer {spec!r} is not callable")
    return target


def _report(
    contract: Contract, item: pytest.Item, violation: ContractViolation, notes: list[str]
) -> str:
    """The failure as a bug report: contract, minimal case, what the trainer did, rerun."""
    trainer = item.name.partition("[")[2].rstrip("]") or FIXTURE
    lines = [
        f"nozero contract '{contract.name}' broken by trainer [{trainer}]",
        f"promise: {contract.promise}",
        "minimal failing case:",
        *("  " + line for line in violation.case.describe().splitlines()),
        f"the trainer {violation.problem}",
    ]
    if isinstance(violation.case, CleanCase):  # Hypothesis's notes hold the full arrays
        lines += notes
    lines.append(f"rerun: pytest --nozero '{item.nodeid}' (Hypothesis's database replays it)")
    return "\n".join(lines)


def _violations(error: BaseException) -> list[ContractViolation]:
    if isinstance(error, ContractViolation):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [found for inner in error.exceptions for found in _violations(inner)]
    return []


def run_contract(contract: Contract, trainer: Any, request: pytest.FixtureRequest) -> None:
    """Run one contract against one trainer under Hypothesis and fail like a bug report."""
    if not isinstance(trainer, TrainerUnderTest):
        pytest.fail(
            f"the {FIXTURE} fixture returned {type(trainer).__name__}; "
            "expected nozero.testing.TrainerUnderTest",
            pytrace=False,
        )
    options: ContractOptions = request.config.stash[OPTIONS_KEY]
    steps = options.steps
    compiled_before = trainer.compile_count() if trainer.compile_count else None

    def check(case: Any) -> None:
        outcome = observe(trainer, case.batches(trainer, steps))
        problem = outcome.malformed or contract.judge(case, outcome, trainer, steps)
        if problem:
            raise ContractViolation(problem, case)

    # One database entry per item, not one shared by every trainer and contract.
    check._hypothesis_internal_add_digest = request.node.nodeid.encode()  # type: ignore[attr-defined]
    for case in reversed(contract.explicit(trainer, steps)):
        check = example(case=case)(check)
    test = given(case=contract.cases(trainer, steps))(check)
    # Per-test settings: no global profile is loaded, so --hypothesis-profile and
    # --hypothesis-seed still apply; deadlines are off because compiling is slow.
    test = settings(
        max_examples=options.examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )(test)
    failure = None
    try:
        test()
    except (ContractViolation, BaseExceptionGroup) as error:
        found = _violations(error)
        if not found:
            raise
        failure = _report(contract, request.node, found[0], getattr(found[0], "__notes__", []))
    if failure is not None:  # failed outside the except block: no chained traceback
        pytest.fail(failure, pytrace=False)

    if compiled_before is not None:
        compiles = trainer.compile_count() - compiled_before
        if compiles > 1:
            pytest.fail(
                f"trainer compiled {compiles} times during the '{contract.name}' contract; "
                "shapes never change across examples, so it should compile at most once "
                "(does run() retrace on a Python value or a changing static argument?)",
                pytrace=False,
            )


def _contract_function(contract: Contract) -> Callable[..., None]:
    def contract_test(nozero_trainer: Any, request: pytest.FixtureRequest) -> None:
        run_contract(contract, nozero_trainer, request)

    contract_test.__name__ = contract_test.__qualname__ = contract.name
    contract_test.__doc__ = contract.promise
    return contract_test


def _label_unparametrized(fixture_name: str) -> Callable[[pytest.Metafunc], None]:
    """Give a single, unparametrized trainer fixture a readable id (its function's name)."""

    def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
        metafunc.parametrize(FIXTURE, [None], ids=[fixture_name], indirect=True)

    return pytest_generate_tests


def _factory_fixture(factories: tuple[str, ...]) -> Any:
    # Imported now, so a wrong name is a usage error before any test runs.
    loaded = {spec: load_factory(spec) for spec in factories}

    @pytest.fixture(name=FIXTURE, params=factories, ids=list(factories))
    def trainer_from_factory(request: pytest.FixtureRequest) -> Any:
        return loaded[request.param]()

    return trainer_from_factory


class ContractModule(pytest.Module):
    """A virtual module holding the contract functions for one trainer registration."""

    def __init__(self, *, namespace: types.ModuleType, **kwargs: Any) -> None:
        self._namespace = namespace
        super().__init__(**kwargs)

    @classmethod
    def for_parent(cls, parent: pytest.Collector, namespace: types.ModuleType) -> ContractModule:
        base = parent.nodeid
        nodeid = "nozero" if base in ("", ".") else f"{base}/nozero"
        path = parent.path / "nozero"
        return cls.from_parent(parent, path=path, name="nozero", nodeid=nodeid, namespace=namespace)

    def _getobj(self) -> types.ModuleType:
        return self._namespace

    def collect(self) -> Iterator[pytest.Item]:
        self.session._fixturemanager.parsefactories(self)
        for contract in CONTRACTS:
            yield from self._genfunctions(contract.name, getattr(self.obj, contract.name))


def _namespace(**extra: Any) -> types.ModuleType:
    module = types.ModuleType("nozero_contracts", "non-finite contract tests")
    for contract in CONTRACTS:
        setattr(module, contract.name, _contract_function(contract))
    for name, value in extra.items():
        setattr(module, name, value)
    return module


class ContractCollection:
    """Adds the contract items after normal collection (registered only with --nozero)."""

    def __init__(self, options: ContractOptions) -> None:
        self.options = options
        self.directories: list[pytest.Collector] = []

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.Directory):
            self.directories.append(collector)

    def _fixture_registrations(self, session: pytest.Session) -> list[ContractModule]:
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
            modules.append(ContractModule.for_parent(node, _namespace(**extra)))
        return modules

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        modules = self._fixture_registrations(session)
        if self.options.factories:
            fixture = _factory_fixture(self.options.factories)
            namespace = _namespace(nozero_trainer=fixture)
            modules.append(ContractModule.for_parent(session, namespace))
        # None means no such fixture anywhere (one outside this selection is not an error).
        if not modules and session._fixturemanager.getfixturedefs(FIXTURE, session) is None:
            raise pytest.UsageError(HOW_TO_REGISTER)
        for module in modules:
            items.extend(session.genitems(module))
