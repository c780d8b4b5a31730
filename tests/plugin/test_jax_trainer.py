"""The contract against a jitted JAX trainer: it passes, and compiles once for the whole run
because every example has the same shapes."""

from __future__ import annotations

# Imported once here so the in-process pytest runs below reuse it instead of re-importing.
import jax  # noqa: F401

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
import jax_trainer

@pytest.fixture
def nozero_trainer():
    return jax_trainer.make_trainer(retrace={retrace})

def pytest_sessionfinish(session):
    with open("compilations.txt", "w") as out:
        out.write(str(jax_trainer._jitted._cache_size()))
"""
FAST = ("--nozero", "--nozero-steps=3", "--nozero-examples=8", "-p", "no:cacheprovider")


def test_jitted_jax_trainer_passes_and_compiles_once(contract_dir):
    contract_dir.makeconftest(CONFTEST.format(retrace=False))
    result = contract_dir.runpytest_inprocess(*FAST, "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["nozero::halts[[]nozero_trainer[]] PASSED*"])
    assert (contract_dir.path / "compilations.txt").read_text() == "1"


def test_trainer_that_recompiles_fails_naming_the_compile_count(contract_dir, item_reports):
    contract_dir.makeconftest(CONFTEST.format(retrace=True))
    reports = item_reports(contract_dir.inline_run(*FAST, "-k", "halts"))
    text = reports["nozero::halts[nozero_trainer]"].longreprtext
    assert "trainer compiled 3 times during the 'halts' check" in text
    assert "should compile at most once" in text
