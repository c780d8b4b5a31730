"""Shared set-up for the plugin's tests: real ``pytest`` runs in scratch directories."""

from __future__ import annotations

from pathlib import Path

# Imported here so in-process pytest runs reuse them: pytester drops modules a run imports,
# and numpy's extension cannot load twice in one process.
import numpy  # noqa: F401
import pytest

TRAINERS = Path(__file__).parent / "trainers"


@pytest.fixture
def contract_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory holding the test trainers as importable modules."""
    for source in TRAINERS.glob("*.py"):
        pytester.makepyfile(**{source.stem: source.read_text()})
    pytester.syspathinsert()
    return pytester


def _item_reports(reprec: pytest.HookRecorder) -> dict[str, pytest.TestReport]:
    reports = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        if report.when == "call" or report.failed:
            reports[report.nodeid] = report
    return reports


@pytest.fixture
def item_reports():
    """``item_reports(reprec)``: the call-phase (or failed set-up) report of each item."""
    return _item_reports
