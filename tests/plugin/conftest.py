"""Shared set-up for the plugin's tests: real ``pytest`` runs in scratch directories."""

from __future__ import annotations

from pathlib import Path

# Imported here so in-process pytest runs reuse them: pytester drops modules a run imports,
# and numpy's extension cannot load twice in one process.
import numpy  # noqa: F401
import pytest

TRAINERS = Path(__file__).parent / "trainers"


@pytest.fixture(autouse=True)
def hypothesis_globals_restored(monkeypatch):
    """In-process runs with --hypothesis-seed/--hypothesis-profile set Hypothesis's
    process-wide seed and default profile; put both back for the tests that follow."""
    from hypothesis import core, settings

    monkeypatch.setattr(core, "global_force_seed", core.global_force_seed)
    profile = settings.get_current_profile_name()
    yield
    settings.load_profile(profile)


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
