"""pytest --nozero: contract tests for trainers (see nozero.testing). Cheap to import.

Every pytest run in an environment with nozero installed loads this module, so it imports
nothing but pytest. Only ``--nozero`` (or ``nozero = true`` in the ini file) loads the
contract machinery (numpy, Hypothesis and the trainers under test).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

DEFAULT_EXAMPLES = 50
DEFAULT_STEPS = 4
FACTORY_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class ContractOptions:
    """The settings of one ``pytest --nozero`` run (command line over ini)."""

    examples: int
    steps: int
    factories: tuple[str, ...]


OPTIONS_KEY = pytest.StashKey[ContractOptions]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nozero", "non-finite training contract")
    group.addoption(
        "--nozero",
        action="store_true",
        default=False,
        help="run the non-finite contract against every registered trainer",
    )
    group.addoption(
        "--nozero-examples",
        metavar="N",
        help=f"Hypothesis examples per contract and trainer (default {DEFAULT_EXAMPLES})",
    )
    group.addoption(
        "--nozero-steps",
        metavar="N",
        help=f"optimizer steps (batches) per trainer run (default {DEFAULT_STEPS})",
    )
    group.addoption(
        "--nozero-trainer",
        action="append",
        default=[],
        metavar="PKG.MOD:FACTORY",
        help="a factory returning a nozero.testing.TrainerUnderTest (repeatable)",
    )
    parser.addini("nozero", type="bool", default=False, help="behave as if --nozero were given")
    parser.addini("nozero_examples", default="", help="as --nozero-examples")
    parser.addini("nozero_steps", default="", help="as --nozero-steps")
    parser.addini(
        "nozero_trainer",
        type="linelist",
        default=[],
        help="factories (pkg.mod:factory, one a line) returning TrainerUnderTest",
    )


def _setting(config: pytest.Config, name: str, default: int) -> int:
    """An integer >= 1 from ``--nozero-NAME`` or the ini key ``nozero_NAME``."""
    given = config.getoption(f"--nozero-{name}")
    where = f"--nozero-{name}"
    if given is None:
        given, where = config.getini(f"nozero_{name}"), f"ini option nozero_{name}"
    if given in (None, ""):
        return default
    try:
        value = int(str(given).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise pytest.UsageError(f"{where} must be a whole number >= 1, got {given!r}")
    return value


def read_options(config: pytest.Config) -> ContractOptions:
    """Validate the contract settings; a bad one is a usage error naming it."""
    factories = tuple(config.getoption("--nozero-trainer")) + tuple(config.getini("nozero_trainer"))
    for spec in factories:
        if not FACTORY_SPEC.fullmatch(spec):
            raise pytest.UsageError(
                f"nozero_trainer {spec!r} is not of the form pkg.module:factory"
            )
    return ContractOptions(
        examples=_setting(config, "examples", DEFAULT_EXAMPLES),
        steps=_setting(config, "steps", DEFAULT_STEPS),
        factories=tuple(dict.fromkeys(factories)),
    )


def pytest_configure(config: pytest.Config) -> None:
    if not (config.getoption("--nozero") or config.getini("nozero")):
        return
    options = read_options(config)
    config.stash[OPTIONS_KEY] = options
    # Deferred on purpose: this import pulls numpy and Hypothesis.
    from nozero._contracts_pytest import ContractCollection

    config.pluginmanager.register(ContractCollection(options), "nozero-contracts")
