"""Guard mistakes as users make them, each caught with a message that points the right
way: the verdict, and the words that name the cause and the fix."""

from __future__ import annotations

import time

# Imported once here so the in-process pytest runs below reuse them instead of reloading.
import flax  # noqa: F401
import jax  # noqa: F401
import optax  # noqa: F401

pytest_plugins = ["pytester"]

FAST = ("--nozero", "--nozero-examples=5", "-p", "no:cacheprovider")
CONFTEST = """
import pytest
from guard_mistakes import make_trainer

OPTIONS = {{"every_four_steps": {{"check_every": 2}}, "isnan_only": {{"poison_fields": ["y"]}}}}

@pytest.fixture(params={mistakes!r})
def nozero_trainer(request):
    return make_trainer(request.param, **OPTIONS.get(request.param, {{}}))
"""


def test_each_mistake_fails_with_its_cause_named(contract_dir, item_reports):
    mistakes = [
        "isnan_only",
        "constant_step",
        "callback_unconverted",
        "every_four_steps",
        "nnx_optimizer_per_run",
    ]
    contract_dir.makeconftest(CONFTEST.format(mistakes=mistakes))
    start = time.perf_counter()
    reports = item_reports(contract_dir.inline_run(*FAST, "--hypothesis-seed=0"))
    elapsed = time.perf_counter() - start

    def text(check: str, mistake: str) -> str:
        report = reports[f"nozero::{check}[{mistake}]"]
        assert report.failed, f"{check}[{mistake}] passed"
        return report.longreprtext

    # Checks isnan only and returns finite params: overflow no longer vouches for it.
    blind = text("overflow", "isnan_only")
    assert "returned normally: a dict whose 2 float arrays are all finite" in blind
    assert "but no per-step history: finite parameters prove nothing" in blind
    assert "nozero.check_finite(step, loss, grad_norm)" in blind

    constant = text("halts", "constant_step")
    assert "the reported step is a constant" in constant
    assert "reset to 0, on every call" in constant and "steps_per_update" not in constant

    wrapped = text("halts", "callback_unconverted")
    assert "the documented message is wrapped in JaxRuntimeError" in wrapped
    assert "jax.debug.callback" in wrapped and "nozero.jax.nonfinite_errors(step)" in wrapped
    assert "the text goes on with ''" not in wrapped

    late = text("halts", "every_four_steps")  # declares check_every=2, checks every 4
    assert "reported step 3, but the poison is in batches[0], optimizer step 0" in late
    assert "promises a step in [0, 2): detected 2 steps late" in late

    for check in ("halts", "overflow", "no_false_alarm", "never_continue"):
        retraced = text(check, "nnx_optimizer_per_run")
        assert "compiled again on a second run over the same clean batches" in retraced
        assert "nnx.Optimizer" in retraced and "nnx.update(model, initial_state)" in retraced
    assert elapsed < 60, f"{elapsed:.1f} s"


def test_a_periodic_check_passes_when_declared(contract_dir):
    """Runs take check_every + 1 steps and poisons leave the window inside the run, so a
    trainer checking every 4 steps that declares it passes."""
    contract_dir.makeconftest(
        CONFTEST.format(mistakes=["every_four_steps"]).replace(
            '"check_every": 2', '"check_every": 4'
        )
    )
    result = contract_dir.runpytest_inprocess(*FAST, "-k", "halts or never")
    result.assert_outcomes(passed=2, deselected=2)


def test_a_retry_forever_trainer_fails_all_four_checks_within_a_minute(contract_dir):
    contract_dir.makeconftest(CONFTEST.format(mistakes=["retries_forever"]))
    start = time.perf_counter()
    result = contract_dir.runpytest_inprocess(*FAST)
    elapsed = time.perf_counter() - start
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(
        [
            "the trainer did not finish one run within 5* s (5 x its first clean run of 1.*"
            " s, at least 5 s; --nozero-timeout sets it): does it retry a poisoned batch "
            "forever, or deadlock?",
            "*guard_mistakes.py*",
        ]
    )
    assert elapsed <= 60, f"{elapsed:.1f} s"


def test_an_unreadable_compile_counter_is_one_failure_not_four_errors(contract_dir):
    contract_dir.makeconftest(
        """
        import pytest
        from guard_mistakes import make_trainer
        from nozero.testing import count_traces

        def train_step(x):  # not jitted
            return x

        @pytest.fixture
        def nozero_trainer():
            return make_trainer("constant_step", compile_count=count_traces(train_step))
        """
    )
    result = contract_dir.runpytest_inprocess(*FAST, "-k", "not halts")
    result.assert_outcomes(failed=1, passed=2, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "*nozero_trainer [[]nozero_trainer[]]: count_traces: <function train_step*"
            "is not a jitted function (jax.jit, equinox.filter_jit, flax.nnx.jit, jax.pmap)*"
        ]
    )
