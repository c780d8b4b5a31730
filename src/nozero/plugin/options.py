"""The settings of one ``pytest --nozero`` run, command line over ini. Imports only pytest:
every pytest run with nozero installed loads this module."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pytest

DEFAULT_EXAMPLES = 50
DEFAULT_STEPS = 4
FACTORY_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class Options:
    """``examples`` per check and trainer, optimizer ``steps`` per run, ``timeout``
    seconds per run (None: follow the trainer's measured clean run), and the trainer
    ``factories`` named in the ini file or on the command line."""

    examples: int
    steps: int
    timeout: float | None
    factories: tuple[str, ...]


OPTIONS_KEY = pytest.StashKey[Options]()


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("nozero", "non-finite training contract")
    group.addoption(
        "--nozero",
        action="store_true",
        default=False,
        help="check the non-finite contract against every registered trainer",
    )
    group.addoption(
        "--nozero-examples",
        metavar="N",
        help=f"Hypothesis examples per check and trainer (default {DEFAULT_EXAMPLES})",
    )
    group.addoption(
        "--nozero-steps",
        metavar="N",
        help=f"optimizer steps per trainer run (default {DEFAULT_STEPS})",
    )
    group.addoption(
        "--nozero-timeout",
        metavar="SECONDS",
        help="time limit of one trainer run (default: 5 x the trainer's first clean run, "
        "at least 5 s)",
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
    parser.addini("nozero_timeout", default="", help="as --nozero-timeout")
    parser.addini(
        "nozero_trainer",
        type="linelist",
        default=[],
        help="factories (pkg.mod:factory, one a line) returning TrainerUnderTest",
    )


def enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--nozero") or config.getini("nozero"))


def _given(config: pytest.Config, name: str) -> tuple[object, str]:
    given = config.getoption(f"--nozero-{name}")
    if given is None:
        return config.getini(f"nozero_{name}"), f"ini option nozero_{name}"
    return given, f"--nozero-{name}"


def _whole_number(config: pytest.Config, name: str, default: int) -> int:
    """An integer >= 1 from ``--nozero-NAME`` or the ini key ``nozero_NAME``."""
    given, where = _given(config, name)
    if given in (None, ""):
        return default
    try:
        value = int(str(given).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise pytest.UsageError(f"{where} must be a whole number >= 1, got {given!r}")
    return value


def _seconds(config: pytest.Config) -> float | None:
    given, where = _given(config, "timeout")
    if given in (None, ""):
        return None
    try:
        value = float(str(given).strip())
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise pytest.UsageError(f"{where} must be a number of seconds > 0, got {given!r}")
    return value


def factories(config: pytest.Config) -> tuple[str, ...]:
    """The factories named on the command line, then in the ini file, each once."""
    named = tuple(config.getoption("--nozero-trainer")) + tuple(config.getini("nozero_trainer"))
    return tuple(dict.fromkeys(named))


def read_options(config: pytest.Config) -> Options:
    """Validate the settings; a bad one is a usage error naming it."""
    named = factories(config)
    for spec in named:
        if not FACTORY_SPEC.fullmatch(spec):
            raise pytest.UsageError(
                f"nozero_trainer {spec!r} is not of the form pkg.module:factory"
            )
    return Options(
        examples=_whole_number(config, "examples", DEFAULT_EXAMPLES),
        steps=_whole_number(config, "steps", DEFAULT_STEPS),
        timeout=_seconds(config),
        factories=named,
    )
