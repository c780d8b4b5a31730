"""equinox trainers checking themselves in the jitted step: converted to the documented
error they pass; left raw, the failure keeps the library's own text and points at the
difference from the documented message."""

from __future__ import annotations

# Imported once here so the in-process pytest runs below reuse them instead of reloading.
import equinox  # noqa: F401
import jax  # noqa: F401

pytest_plugins = ["pytester"]

FAST = ("--nozero", "--nozero-steps=3", "--nozero-examples=5", "-p", "no:cacheprovider")
CONFTEST = """
import pytest
from equinox_trainers import make_trainer

@pytest.fixture(params={styles!r})
def nozero_trainer(request):
    return make_trainer(request.param)
"""


def test_converted_error_if_and_checkify_trainers_pass(contract_dir):
    styles = ["error_if_converted", "checkify_converted"]
    contract_dir.makeconftest(CONFTEST.format(styles=styles))
    contract_dir.runpytest_inprocess(*FAST).assert_outcomes(passed=8)


def test_raw_library_errors_fail_keeping_their_text_and_naming_the_difference(
    contract_dir, item_reports
):
    styles = ["error_if_raw", "checkify_raw"]
    contract_dir.makeconftest(CONFTEST.format(styles=styles))
    reports = item_reports(contract_dir.inline_run(*FAST, "-k", "halts"))
    equinox_text = reports["nozero::halts[error_if_raw]"].longreprtext
    assert "raised EquinoxRuntimeError: Above is the stack outside of JIT" in equinox_text
    # equinox's message is kept whole, down to its last line
    assert "See `https://docs.kidger.site/equinox/api/debug/` for more suggestions." in (
        equinox_text
    )
    assert "characters of other text come before the documented message" in equinox_text
    assert "raised at " in equinox_text and "equinox_trainers.py:" in equinox_text
    checkify_text = reports["nozero::halts[checkify_raw]"].longreprtext
    assert "raised jax._src.checkify.JaxRuntimeError: non-finite loss/grad at step 0" in (
        checkify_text
    )
    assert "but the text goes on with ' (`check` failed)'" in checkify_text
