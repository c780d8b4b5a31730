"""The contract against plain-numpy trainers: the correct one passes, each broken one fails
with a message that names what it did wrong."""

from __future__ import annotations

pytest_plugins = ["pytester"]

CONTRACTS = ("halts", "overflow", "no_false_alarm", "never_continue")
FAST = ("--nozero", "--nozero-steps=3", "-p", "no:cacheprovider", "--hypothesis-seed=0")

# bug -> (the contract that must catch it, words the failure must contain)
EXPECTED = {
    "nan_to_num": ("halts", "but the grad norm is 0.0: the gradient was made finite"),
    "skip_nan_loss": ("halts", "steps skipped"),
    "check_every_500": ("halts", "check_every=1 promises a step in [1, 2) (detected late"),
    "catch_and_continue": ("halts", "never raised: returned normally"),
    "keep_old_params": ("halts", "its history's first non-finite entry is step 0: loss=nan"),
    "value_error": ("halts", "raised ValueError: loss became nan at step 0 — expected the"),
    "loss_only": ("overflow", "grad_norm=inf — a non-finite loss or grad norm must raise"),
    "one_based_step": ("halts", "reported step 1, but the poison is at step 0"),
    "stale_values": ("halts", "both finite: it must report the non-finite values"),
    "standardize": ("no_false_alarm", "false alarm: raised the documented error at step 0"),
}


def test_correct_plain_numpy_trainer_passes_every_contract(contract_dir):
    contract_dir.makeconftest(
        """
        import pytest
        from numpy_trainers import make_trainer

        @pytest.fixture
        def nozero_trainer():
            return make_trainer()
        """
    )
    contract_dir.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = contract_dir.runpytest_inprocess(*FAST, "--nozero-examples=10", "-v")
    result.assert_outcomes(passed=5)
    for contract in CONTRACTS:
        result.stdout.fnmatch_lines([f"nozero::{contract}[[]nozero_trainer[]] PASSED*"])


def test_each_broken_trainer_fails_naming_what_went_wrong(contract_dir, item_reports):
    contract_dir.makeconftest(
        f"""
        import pytest
        from numpy_trainers import make_trainer

        @pytest.fixture(params={sorted(EXPECTED)!r})
        def nozero_trainer(request):
            return make_trainer(request.param)
        """
    )
    reprec = contract_dir.inline_run(*FAST, "--nozero-examples=20")
    reports = item_reports(reprec)
    assert len(reports) == 4 * len(EXPECTED)
    for bug, (contract, words) in EXPECTED.items():
        report = reports[f"nozero::{contract}[{bug}]"]
        assert report.failed, f"{bug} passed {contract}"
        text = report.longreprtext
        assert f"nozero contract '{contract}' broken by trainer [{bug}]" in text
        assert "minimal failing case:" in text
        assert words in text, f"{bug}: {words!r} not in\n{text}"


def test_failure_is_shrunk_to_a_minimal_reproducible_case(contract_dir):
    contract_dir.makeconftest(
        """
        import pytest
        from numpy_trainers import make_trainer

        @pytest.fixture
        def nozero_trainer():
            return make_trainer("check_every_500")
        """
    )
    result = contract_dir.runpytest_inprocess(*FAST, "--nozero-examples=30", "-k", "halts")
    result.assert_outcomes(failed=1, deselected=3)
    # The smallest late case: NaN, first field, first element, the first unchecked step.
    result.stdout.fnmatch_lines(
        [
            "  poison: nan (nan) at batches[[]1[]][[]'x'[]][[]0, 0[]]",
            "  clean values elsewhere: trainer.clean_batches(seed=0)",
            "rerun: pytest --nozero 'nozero::halts[[]nozero_trainer[]]'*",
        ]
    )


def test_bad_trainer_values_read_as_failures(contract_dir, item_reports):
    contract_dir.makeconftest(
        """
        import pytest
        from numpy_trainers import make_trainer
        from nozero.testing import TrainerUnderTest

        def returns_a_number(batches):
            return 3.0

        @pytest.fixture(params=["not a trainer", "bad history"])
        def nozero_trainer(request):
            if request.param == "bad history":
                return TrainerUnderTest(make_trainer().batch_spec, returns_a_number)
            return object()
        """
    )
    reports = item_reports(contract_dir.inline_run(*FAST, "--nozero-examples=3", "-k", "halts"))
    assert "returned object; expected nozero.testing.TrainerUnderTest" in (
        reports["nozero::halts[not a trainer]"].longreprtext
    )
    assert "run returned a float, not None or a sequence of (loss, grad_norm) pairs" in (
        reports["nozero::halts[bad history]"].longreprtext
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
