"""pytest --nozero: the contract checks for trainers (see nozero.testing). Cheap to import.

Every pytest run in an environment with nozero installed loads this module, so it imports
nothing but pytest. Only ``--nozero`` (or ``nozero = true`` in the ini file) loads the
checking machinery (numpy, Hypothesis and the trainers under test).
"""

from __future__ import annotations

import pytest

from nozero.plugin.options import OPTIONS_KEY, add_options, enabled, factories, read_options


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    if not enabled(config):
        return
    options = read_options(config)
    config.stash[OPTIONS_KEY] = options
    # Deferred on purpose: this import pulls numpy and Hypothesis.
    from nozero.plugin.collection import CheckCollection

    config.pluginmanager.register(CheckCollection(config, options), "nozero-checks")


def pytest_report_header(config: pytest.Config) -> str | None:
    if not enabled(config):
        return None
    named = ", ".join(factories(config)) or "none"
    return (
        f"nozero: trainers from factories: {named}; plus every 'nozero_trainer' fixture "
        "in the collected conftests"
    )
