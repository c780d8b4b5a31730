"""How trainers are registered and configured: fixture, parametrized fixture, ini option,
command line; usage errors; Hypothesis's own options keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

FAST = ("--nozero-steps=3", "--nozero-examples=5", "-p", "no:cacheprovider")
FIXTURE = """
import pytest
from numpy_trainers import make_trainer

@pytest.fixture
def nozero_trainer():
    return make_trainer()
"""


def test_without_nozero_the_plugin_adds_no_items(contract_dir):
    contract_dir.makeconftest(FIXTURE)
    contract_dir.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = contract_dir.runpytest_inprocess(*FAST, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_plain.py::test_plain", "1 test collected*"])
    result.stdout.no_fnmatch_line("*nozero::*")


def test_no_trainer_registered_is_a_usage_error_saying_how_to_register(pytester):
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_inprocess("--nozero")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --nozero found no trainer to test. Register one: a fixture named*"]
    )
    assert "nozero_trainer = pkg.module:factory" in result.stderr.str()


def test_ini_option_nozero_enables_the_contract(contract_dir):
    contract_dir.makeconftest(FIXTURE)
    contract_dir.makeini("[pytest]\nnozero = true\n")
    result = contract_dir.runpytest_inprocess(*FAST, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["nozero::halts[[]nozero_trainer[]]", "4 tests collected*"])


def test_parametrized_fixture_registers_one_set_per_trainer(contract_dir):
    contract_dir.makeconftest(
        """
        import pytest
        import numpy_trainers

        @pytest.fixture(params=["numpy_sgd", "numpy_sgd_again"])
        def nozero_trainer(request):
            return numpy_trainers.make_trainer()
        """
    )
    result = contract_dir.runpytest_inprocess("--nozero", *FAST, "-v")
    result.assert_outcomes(passed=8)
    for trainer in ("numpy_sgd", "numpy_sgd_again"):
        result.stdout.fnmatch_lines([f"nozero::never_continue[[]{trainer}[]] PASSED*"])


def test_fixture_name_gives_the_id_and_a_subdirectory_conftest_is_found(contract_dir):
    contract_dir.mkpydir("suite")
    contract_dir.path.joinpath("suite", "conftest.py").write_text(
        "import pytest\nfrom numpy_trainers import make_trainer\n\n"
        "@pytest.fixture(name='nozero_trainer')\ndef numpy_logistic():\n"
        "    return make_trainer()\n"
    )
    result = contract_dir.runpytest_inprocess("--nozero", *FAST, "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["suite/nozero::halts[[]numpy_logistic[]] PASSED*"])


def test_ini_factory_and_command_line_factory_register_trainers(contract_dir):
    contract_dir.makeini("[pytest]\nnozero_trainer =\n    numpy_trainers:correct\n")
    result = contract_dir.runpytest_inprocess(
        "--nozero", *FAST, "--nozero-trainer=numpy_trainers:make_trainer", "-v"
    )
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(
        [
            "nozero::halts[[]numpy_trainers:make_trainer[]] PASSED*",
            "nozero::halts[[]numpy_trainers:correct[]] PASSED*",
        ]
    )


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--nozero-examples=0"], "", "--nozero-examples must be a whole number >= 1, got '0'"),
        ([], "nozero_steps = many", "ini option nozero_steps must be a whole number >= 1"),
        ([], "nozero_trainer = no colon", "nozero_trainer 'no colon' is not of the form"),
        ([], "nozero_trainer = missing_mod:make", "cannot import missing_mod"),
        ([], "nozero_trainer = numpy_trainers:nothing", "numpy_trainers has no nothing"),
    ],
)
def test_bad_settings_are_usage_errors_naming_the_setting(contract_dir, args, ini, message):
    contract_dir.makeini(f"[pytest]\n{ini}\n")
    result = contract_dir.runpytest_inprocess("--nozero", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_steps_and_examples_reach_the_trainer(contract_dir):
    contract_dir.makeconftest(
        """
        import pytest
        from numpy_trainers import make_trainer
        from nozero.testing import TrainerUnderTest

        CALLS = []

        @pytest.fixture
        def nozero_trainer():
            inner = make_trainer()

            def run(batches):
                CALLS.append(len(batches))
                return inner.run(batches)

            return TrainerUnderTest(inner.batch_spec, run, make_clean_batch=inner.make_clean_batch)

        def pytest_sessionfinish(session):
            with open("calls.txt", "w") as out:
                out.write(" ".join(map(str, CALLS)))
        """
    )
    contract_dir.makeini("[pytest]\nnozero_steps = 5\nnozero_examples = 50\n")
    contract_dir.runpytest_inprocess(
        "--nozero", "--nozero-examples=7", "-k", "no_false_alarm"
    ).assert_outcomes(passed=1, deselected=3)
    calls = [int(n) for n in (contract_dir.path / "calls.txt").read_text().split()]
    assert set(calls) == {5}  # the ini value
    # one clean run that sets the time limit, three explicit examples (as made, zeroed,
    # at the largest magnitude), at most 7 generated
    assert 1 + 3 + 1 <= len(calls) <= 1 + 3 + 7


FINGERPRINT = """
import hashlib
import pytest
from hypothesis import Phase, settings
from numpy_trainers import make_trainer
from nozero.testing import TrainerUnderTest

# derandomize=False: on CI Hypothesis derandomizes by default, and then no seed matters.
settings.register_profile("no_database", database=None, derandomize=False)
settings.register_profile("explicit_only", database=None, phases=[Phase.explicit])
SEEN = []

@pytest.fixture
def nozero_trainer():
    inner = make_trainer()

    def run(batches):
        SEEN.append(hashlib.sha1(b"".join(b["x"].tobytes() for b in batches)).hexdigest())
        return inner.run(batches)

    return TrainerUnderTest(inner.batch_spec, run)

def pytest_sessionfinish(session):
    with open("seen.txt", "w") as out:
        out.write("\\n".join(SEEN))
"""


def test_hypothesis_seed_and_profile_options_apply(contract_dir):
    contract_dir.makeconftest(FINGERPRINT)

    def drawn(*options: str) -> list[str]:
        contract_dir.runpytest_inprocess(
            "--nozero", *FAST, "-k", "no_false_alarm", *options
        ).assert_outcomes(passed=1, deselected=3)
        return (contract_dir.path / "seen.txt").read_text().split()

    first = drawn("--hypothesis-profile=no_database", "--hypothesis-seed=1")
    assert len(first) > 2
    assert drawn("--hypothesis-profile=no_database", "--hypothesis-seed=1") == first
    assert drawn("--hypothesis-profile=no_database", "--hypothesis-seed=2") != first
    # the clean run that sets the time limit, and the explicit examples only
    assert len(drawn("--hypothesis-profile=explicit_only")) == 1 + 3
    assert not (contract_dir.path / ".hypothesis" / "examples").exists()


def test_example_database_replays_a_failure(contract_dir):
    contract_dir.makeconftest(
        """
        import pytest
        from hypothesis import settings
        from hypothesis.database import DirectoryBasedExampleDatabase
        from numpy_trainers import make_trainer

        settings.register_profile("local", database=DirectoryBasedExampleDatabase("db"))

        @pytest.fixture
        def nozero_trainer():
            return make_trainer("check_every_500")
        """
    )
    options = ("--nozero", "--nozero-steps=3", "-k", "halts", "--hypothesis-profile=local")
    # enough cases that one poisons the step the trainer leaves unchecked (a draw of 40
    # once missed it)
    first = contract_dir.runpytest_inprocess(*options, "--nozero-examples=150")
    first.assert_outcomes(failed=1, deselected=3)
    assert list((contract_dir.path / "db").iterdir())
    # One generated example is enough now: the saved failing case is replayed first.
    again = contract_dir.runpytest_inprocess(*options, "--nozero-examples=1")
    again.assert_outcomes(failed=1, deselected=3)
    again.stdout.fnmatch_lines(
        ["*reported step 2, but the poison is in batches[[]1[]], optimizer step 1*"]
    )


def test_report_header_says_which_trainers_are_registered(contract_dir):
    contract_dir.makeconftest(FIXTURE)
    contract_dir.makeini("[pytest]\nnozero_trainer =\n    numpy_trainers:correct\n")
    result = contract_dir.runpytest_inprocess("--nozero", *FAST, "--collect-only")
    result.stdout.fnmatch_lines(
        [
            "nozero: trainers from factories: numpy_trainers:correct; plus every "
            "'nozero_trainer' fixture in the collected conftests",
            "nozero: 2 trainers registered: [[]nozero_trainer[]], [[]numpy_trainers:correct[]]",
        ]
    )
    plain = contract_dir.runpytest_inprocess(*FAST, "--collect-only")
    plain.stdout.no_fnmatch_line("nozero: *")  # no header line without --nozero
    contract_dir.makeini("[pytest]\n")
    one = contract_dir.runpytest_inprocess("--nozero", *FAST, "--collect-only")
    one.stdout.fnmatch_lines(["nozero: 1 trainer registered: [[]nozero_trainer[]]"])


def _plain_pytest(directory, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The ``pytest`` script itself, not ``python -m pytest`` (which adds the cwd to sys.path)."""
    script = Path(sys.executable).with_name("pytest")
    return subprocess.run(
        [str(script), "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_command_line_factory_works_under_plain_pytest(contract_dir):
    done = _plain_pytest(
        contract_dir.path,
        "--nozero",
        "--nozero-trainer=numpy_trainers:correct",
        "--nozero-examples=3",
        "--nozero-steps=2",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_factory_outside_the_rootdir_is_a_usage_error_saying_how(pytester):
    elsewhere = pytester.mkdir("elsewhere")
    (elsewhere / "faraway.py").write_text("def make():\n    return None\n")
    project = pytester.mkdir("project")
    (project / "pytest.ini").write_text("[pytest]\n")
    done = _plain_pytest(project, "--nozero", "--nozero-trainer=faraway:make")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "cannot import faraway" in done.stderr
    assert "add `pythonpath = <the folder holding it>` to the [pytest] ini section" in done.stderr


def test_printed_rerun_command_works_as_printed(contract_dir):
    # A trainer that fails on every poisoned case: the first run fails whatever Hypothesis
    # draws (a check every 500 steps passed when every drawn poison sat on a checked step).
    trainer = 'make_trainer("catch_and_continue")'
    contract_dir.makeconftest(FIXTURE.replace("make_trainer()", trainer))
    contract_dir.makepyfile(test_plain="def test_plain():\n    pass\n")
    first = contract_dir.runpytest_subprocess("--nozero", *FAST, timeout=120)
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    failed = next(line for line in first.outlines if line.startswith("nozero check '"))
    check = failed.split("'")[1]
    rerun = next(line for line in first.outlines if line.startswith("rerun: "))
    command = rerun.removeprefix("rerun: ").split("  (")[0]
    assert command.endswith(f"'nozero::{check}[nozero_trainer]'"), command
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    again = subprocess.run(
        command,
        shell=True,
        cwd=contract_dir.path,
        env={**os.environ, "PATH": path, "PYTHONPATH": str(contract_dir.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = again.stdout.strip().splitlines()[-1]
    assert " 1 failed, 4 deselected in " in summary, again.stdout + again.stderr
    assert failed in again.stdout
