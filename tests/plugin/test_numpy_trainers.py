"""The checks against plain-numpy trainers: the correct ones pass, each broken one fails
with a message that names what it did wrong."""

from __future__ import annotations

import time

pytest_plugins = ["pytester"]

CHECKS = ("halts", "overflow", "no_false_alarm", "never_continue")
FAST = ("--nozero", "--nozero-steps=4", "-p", "no:cacheprovider", "--hypothesis-seed=0")
PARAMETRIZED = """
import pytest
from numpy_trainers import make_trainer

OPTIONS = {options!r}

@pytest.fixture(params={bugs!r})
def nozero_trainer(request):
    return make_trainer(request.param, **OPTIONS.get(request.param, {{}}))
"""

# bug -> (the check that must catch it, words the failure must contain)
EXPECTED = {
    "nan_to_num": ("halts", "but the grad norm is 0.0: the gradient was made finite"),
    "skip_nan_loss": ("halts", "steps skipped"),
    "check_every_500": ("halts", "promises a step in [1, 2): detected 2 steps late"),
    "catch_and_continue": ("halts", "never raised: returned normally"),
    "keep_old_params": ("halts", "its history's first non-finite entry is step 0: loss=nan"),
    "value_error": ("halts", "raised ValueError: loss became nan at step 0"),
    "loss_only": ("overflow", "grad_norm=inf\n  — a non-finite loss, grad norm or parameter"),
    "one_based_step": ("halts", "off-by-one: it numbers steps from 1"),
    "stale_values": ("halts", "both finite: it must report the non-finite values"),
    "standardize": ("no_false_alarm", "diverged on clean, finite batches"),
    "loss_only_returns_none": ("overflow", "returning nothing: nothing shows whether"),
    "ascii_hyphen": (
        "halts",
        "got '-' (U+002D HYPHEN-MINUS), expected '—' (U+2014 EM DASH)",
    ),
    "checkify_suffix": ("halts", "but the text goes on with ' (`check` failed)'"),
    "type_error": ("never_continue", "raised TypeError: unsupported operand type(s)"),
    "micro_steps": ("halts", "step-unit mismatch: it reported the micro-batch index"),
    "accumulates": (
        "halts",
        "step-unit mismatch: step 1 is the optimizer step of batch 3 if each optimizer step "
        "takes 2 batches",
    ),
}
DECLARED = {"micro_steps": {"steps_per_update": 2}}
# never_continue has its own catches: each of these returns, trains on, or raises wrongly.
NEVER_CONTINUE_CATCHES = (
    "ascii_hyphen",
    "catch_and_continue",
    "check_every_500",
    "keep_old_params",
    "nan_to_num",
    "skip_nan_loss",
    "type_error",
    "value_error",
)


def test_correct_plain_numpy_trainers_pass_every_check(contract_dir):
    """A history, a returned model, and declared gradient accumulation all pass."""
    bugs = ["correct", "model", "accumulates"]
    options = {"accumulates": {"steps_per_update": 2}}
    contract_dir.makeconftest(PARAMETRIZED.format(bugs=bugs, options=options))
    contract_dir.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = contract_dir.runpytest_inprocess(*FAST, "--nozero-examples=10", "-v")
    result.assert_outcomes(passed=1 + 4 * len(bugs))
    for check in CHECKS:
        for bug in bugs:
            result.stdout.fnmatch_lines([f"nozero::{check}[[]{bug}[]] PASSED*"])
    result.stdout.fnmatch_lines(["nozero: 3 trainers registered: [[]accumulates[]]*"])
    assert "RuntimeWarning" not in result.stdout.str()


def test_each_broken_trainer_fails_naming_what_went_wrong(contract_dir, item_reports):
    bugs = sorted(EXPECTED)
    contract_dir.makeconftest(PARAMETRIZED.format(bugs=bugs, options=DECLARED))
    reprec = contract_dir.inline_run(*FAST, "--nozero-examples=20")
    reports = item_reports(reprec)
    assert len(reports) == 4 * len(EXPECTED)
    for bug, (check, words) in EXPECTED.items():
        report = reports[f"nozero::{check}[{bug}]"]
        assert report.failed, f"{bug} passed {check}"
        text = report.longreprtext
        assert f"nozero check '{check}' failed for trainer [{bug}]" in text
        assert "minimal failing case:" in text
        assert words in text, f"{bug}: {words!r} not in\n{text}"
        assert len(text) < 6000, f"{bug}: a {len(text)}-character report"
    for bug in NEVER_CONTINUE_CATCHES:
        assert reports[f"nozero::never_continue[{bug}]"].failed, bug
    for bug in ("stale_values", "loss_only"):
        assert reports[f"nozero::never_continue[{bug}]"].passed, bug  # they do stop in time
    assert "off-by-one" in reports["nozero::never_continue[one_based_step]"].longreprtext
    micro = reports["nozero::never_continue[micro_steps]"].longreprtext
    assert "step-unit mismatch" in micro


def test_other_exceptions_fail_never_continue_with_type_message_and_raise_line(
    contract_dir, item_reports
):
    contract_dir.makeconftest(PARAMETRIZED.format(bugs=["type_error", "value_error"], options={}))
    reports = item_reports(contract_dir.inline_run(*FAST, "--nozero-examples=5"))
    for bug in ("type_error", "value_error"):
        text = reports[f"nozero::never_continue[{bug}]"].longreprtext
        assert "— expected the documented error (nozero.NonFiniteError" in text
        assert "raised at " in text and "numpy_trainers.py:" in text and " in run: raise" in text
    assert reports["nozero::no_false_alarm[type_error]"].failed
    assert reports["nozero::no_false_alarm[value_error]"].passed


def test_trainer_that_retries_forever_fails_in_bounded_time(contract_dir):
    contract_dir.makeconftest(PARAMETRIZED.format(bugs=["retries_forever"], options={}))
    start = time.perf_counter()
    result = contract_dir.runpytest_inprocess(
        *FAST, "--nozero-timeout=1", "--nozero-examples=5", "-k", "halts or no_false_alarm"
    )
    elapsed = time.perf_counter() - start
    result.assert_outcomes(failed=1, passed=1, deselected=2)
    result.stdout.fnmatch_lines(
        [
            "the trainer did not finish one run within 1 s (--nozero-timeout / ini "
            "nozero_timeout): does it retry a poisoned batch forever, or deadlock?",
            "  it was at:",
            "*numpy_trainers.py*",
        ]
    )
    assert elapsed < 20, f"{elapsed:.1f} s"


def test_failure_is_shrunk_to_a_minimal_reproducible_case(contract_dir):
    contract_dir.makeconftest(PARAMETRIZED.format(bugs=["check_every_500"], options={}))
    result = contract_dir.runpytest_inprocess(*FAST, "--nozero-examples=30", "-k", "halts")
    result.assert_outcomes(failed=1, deselected=3)
    # The smallest late case: NaN, first field, first element, the first unchecked step.
    result.stdout.fnmatch_lines(
        [
            "  poison: nan (nan) at batches[[]1[]][[]'x'[]][[]0, 0[]]",
            "  clean values elsewhere: trainer.clean_batches(seed=0)",
            "rerun: *pytest --nozero --nozero-examples=30 --nozero-steps=4 --hypothesis-seed=0 "
            "'nozero::halts[[]check_every_500[]]'*",
        ]
    )


def test_clean_data_failure_names_the_field_its_transformation_and_how_to_declare(
    contract_dir, item_reports
):
    bugs = ["standardize", "squared_error", "squared_error_in_range"]
    ranges = "{'x': FieldRange(max_magnitude=10.0)}"
    contract_dir.makeconftest(
        f"""
        import pytest
        from numpy_trainers import make_trainer
        from nozero.testing import FieldRange

        @pytest.fixture(params={bugs!r})
        def nozero_trainer(request):
            if request.param == "squared_error_in_range":
                return make_trainer("squared_error", field_ranges={ranges})
            return make_trainer(request.param)
        """
    )
    reports = item_reports(contract_dir.inline_run(*FAST, "--nozero-examples=40"))
    zeros = reports["nozero::no_false_alarm[standardize]"].longreprtext
    assert "diverged on clean, finite batches" in zeros and "false alarm" not in zeros
    assert "- batches[0]['x']: zeroed (max |x| 0)" in zeros
    assert "TrainerUnderTest(field_ranges={'x': FieldRange(nonzero_per_row=1)})" in zeros
    large = reports["nozero::no_false_alarm[squared_error]"].longreprtext
    assert "diverged on clean, finite batches: raised the documented error at step" in large
    assert "rescaled to max |x| 1e+06" in large
    assert "FieldRange(max_magnitude=1000)" in large and "clip gradients" in large
    assert "array(" not in large  # the case, not Hypothesis's array dump
    assert reports["nozero::no_false_alarm[squared_error_in_range]"].passed


def test_bad_trainer_values_read_as_failures(contract_dir, item_reports):
    contract_dir.makeconftest(
        """
        import pytest
        from numpy_trainers import make_trainer
        from nozero.testing import TrainerUnderTest

        def returns_a_number(batches):
            return "done"

        @pytest.fixture(params=["not a trainer", "bad result"])
        def nozero_trainer(request):
            if request.param == "bad result":
                return TrainerUnderTest(make_trainer().batch_spec, returns_a_number)
            return object()
        """
    )
    reports = item_reports(contract_dir.inline_run(*FAST, "--nozero-examples=3", "-k", "halts"))
    assert "returned object; expected nozero.testing.TrainerUnderTest" in (
        reports["nozero::halts[not a trainer]"].longreprtext
    )
    assert "run returned a str holding no float arrays: return the per-step" in (
        reports["nozero::halts[bad result]"].longreprtext
    )


def test_declared_check_every_widens_the_window_a_trainer_is_held_to(contract_dir):
    contract_dir.makeconftest(
        """
        import pytest
        from numpy_trainers import make_trainer

        @pytest.fixture(params=[1, 500], ids=["declares_1", "declares_500"])
        def nozero_trainer(request):
            return make_trainer("check_every_500", check_every=request.param)
        """
    )
    result = contract_dir.runpytest_inprocess(*FAST, "--nozero-examples=20", "-v", "-k", "halts")
    result.stdout.fnmatch_lines(
        ["nozero::halts[[]declares_1[]] FAILED*", "nozero::halts[[]declares_500[]] PASSED*"]
    )


def test_warnings_caused_by_the_poison_are_silenced(contract_dir):
    contract_dir.makeconftest(
        """
        import numpy as np
        import pytest
        from nozero import check_finite
        from nozero.testing import TrainerUnderTest

        def run(batches):  # no np.errstate: the poison makes numpy warn
            for step, batch in enumerate(batches):
                loss = float(np.mean(np.exp(batch["x"]) - batch["x"]))
                check_finite(step, loss, loss)

        @pytest.fixture
        def nozero_trainer():
            return TrainerUnderTest({"x": ((4, 2), np.float32)}, run, vary_fields=())
        """
    )
    result = contract_dir.runpytest_inprocess(
        *FAST, "--nozero-examples=10", "-W", "error::RuntimeWarning", "-k", "halts or never"
    )
    result.assert_outcomes(passed=2, deselected=2)
    assert "RuntimeWarning" not in result.stdout.str()


def test_a_value_nozero_cannot_read_is_reported_as_nozeros_problem(contract_dir):
    contract_dir.makeconftest(
        """
        import numpy as np
        import pytest
        from numpy_trainers import make_trainer
        from nozero.testing import TrainerUnderTest

        class Offloaded:
            '''Parameters paged out to a store that has gone away.'''
            shape, dtype = (4, 1), np.float32

            def __array__(self, dtype=None, copy=None):
                raise OSError("the parameter store is closed")

        def run(batches):
            make_trainer().run(batches)
            return {"layer": {"w": Offloaded()}}

        @pytest.fixture
        def nozero_trainer():
            inner = make_trainer()
            return TrainerUnderTest(inner.batch_spec, run, make_clean_batch=inner.make_clean_batch)
        """
    )
    result = contract_dir.runpytest_inprocess(*FAST, "-k", "no_false_alarm")
    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines(
        [
            "nozero check 'no_false_alarm' could not be judged: nozero failed to read what run "
            "returned, at ['layer']['w']: OSError('the parameter store is closed')",
            "This is nozero's problem, not the trainer's*",
        ]
    )
    assert "minimal failing case" not in result.stdout.str()


def test_a_poisoned_mask_is_named_as_one_with_how_to_declare_it(contract_dir):
    contract_dir.makeconftest(
        """
        import numpy as np
        import pytest
        from nozero import check_finite
        from nozero.testing import TrainerUnderTest

        def run(batches):  # masked mean pooling: a NaN in the mask selects nothing
            history = []
            for step, batch in enumerate(batches):
                x, mask = batch["x"], batch["mask"]
                pooled = np.where(mask > 0, x, 0.0).sum(1) / np.maximum(mask.sum(1), 1)
                loss = float(np.mean(pooled**2))
                check_finite(step, loss, loss)
                history.append((loss, loss))
            return history

        @pytest.fixture
        def nozero_trainer():
            rng = np.random.default_rng(0)
            example = {"x": rng.standard_normal((4, 3)).astype(np.float32),
                       "mask": np.array([[1, 1, 0]] * 4, np.float32)}
            return TrainerUnderTest.from_example(example, run)
        """
    )
    result = contract_dir.runpytest_inprocess(*FAST, "--hypothesis-seed=0", "-k", "halts")
    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines(
        [
            "  poison: * at batches[[]*[]][[]'mask'[]]*",
            "  note: 'mask' holds only 0 and 1 in clean batches (a mask?)*poison_fields=*",
        ]
    )
