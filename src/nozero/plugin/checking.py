"""Run one check against one trainer under Hypothesis, and fail like a bug report: the
check, the shrunk case, what the trainer did, and a rerun command that works as printed."""

from __future__ import annotations

import shlex
import sys
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from nozero.plugin.calibration import Calibration, calibrate
from nozero.plugin.cases import run_steps
from nozero.plugin.judges import Check, Trial
from nozero.plugin.options import OPTIONS_KEY, Options
from nozero.plugin.quiet import quiet_frameworks
from nozero.plugin.returned import ReaderFailure
from nozero.plugin.trainer import TrainerUnderTest

FIXTURE = "nozero_trainer"
CALIBRATIONS_KEY = pytest.StashKey[dict[str, Calibration]]()
REPORTED_KEY = pytest.StashKey[set[str]]()


class CheckFailed(AssertionError):
    """Raised inside the Hypothesis test so it shrinks; carries the case and the verdict."""

    def __init__(self, problem: str, case: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.case = case


class RunTimedOut(BaseException):
    """A run past the time limit: stops Hypothesis at once (shrinking it would take one
    time limit per attempt)."""

    def __init__(self, problem: str, case: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.case = case


def rerun_command(item: pytest.Item) -> str:
    """The command that reruns ``item`` as printed: same launcher, same nozero options."""
    config = item.config
    launcher = "python -m pytest" if sys.argv[0].endswith("__main__.py") else "pytest"
    words = [launcher, "--nozero"]
    for name in ("examples", "steps", "timeout"):
        value = config.getoption(f"--nozero-{name}")
        if value is not None:
            words.append(f"--nozero-{name}={value}")
    words += [f"--nozero-trainer={spec}" for spec in config.getoption("--nozero-trainer")]
    seed = config.getoption("hypothesis_seed", None)
    if seed is not None:
        words.append(f"--hypothesis-seed={seed}")
    words.append(item.nodeid)
    command = " ".join(shlex.quote(word) if word != launcher else word for word in words)
    if config.invocation_params.dir != config.rootpath:
        command = f"cd {shlex.quote(str(config.rootpath))} && {command}"
    return command


def _report(check: Check, item: pytest.Item, failure: CheckFailed | RunTimedOut, trainer) -> str:
    """The failure as a bug report: check, minimal case, what the trainer did, rerun."""
    label = _label(item)
    return "\n".join(
        [
            f"nozero check '{check.name}' failed for trainer [{label}]",
            f"promise: {check.promise}",
            "minimal failing case:",
            *("  " + line for line in failure.case.describe(trainer).splitlines()),
            f"the trainer {failure.problem}",
            f"rerun: {rerun_command(item)}  (Hypothesis's database replays the case)",
        ]
    )


def _failures(error: BaseException) -> list[CheckFailed]:
    if isinstance(error, CheckFailed):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [found for inner in error.exceptions for found in _failures(inner)]
    return []


class ReaderFailed(BaseException):
    """nozero could not read what a run returned: stops Hypothesis, blames nozero."""

    def __init__(self, failure: ReaderFailure) -> None:
        super().__init__(str(failure))
        self.failure = failure


def _timeout_problem(trial: Trial, stuck_at: str, basis: str) -> str:
    where = f"\n  it was at:\n{stuck_at}" if stuck_at else ""
    return (
        f"did not finish one run within {trial.seconds:.3g} s ({basis}): does it retry a "
        "poisoned batch forever, or deadlock?" + where
    )


def _reader_report(check: Check, item: pytest.Item, failure: ReaderFailure) -> str:
    return (
        f"nozero check '{check.name}' could not be judged: nozero failed to read what run "
        f"returned, at {failure.path}: {failure.error!r}\n"
        "This is nozero's problem, not the trainer's: please report it with the type of that "
        "value. Until it is fixed, return the per-step (loss, grad_norm) history instead."
    )


def _label(item: pytest.Item) -> str:
    return item.name.partition("[")[2].rstrip("]") or FIXTURE


def _calibration(trainer: TrainerUnderTest, steps: int, options: Options, item) -> Calibration:
    """The trainer's measured clean run, once per registration (fixtures make a new
    trainer object for each check)."""
    known = item.config.stash.setdefault(CALIBRATIONS_KEY, {})
    label = _label(item)
    if label not in known:
        known[label] = calibrate(trainer, steps, options.timeout)
    return known[label]


def _registration_problem(trainer: TrainerUnderTest, item: pytest.Item) -> str | None:
    """A compile counter that cannot count, reported by one check per registration; the
    others run without it."""
    problem = getattr(trainer.compile_count, "problem", None)
    if problem is None:
        return None
    reported = item.config.stash.setdefault(REPORTED_KEY, set())
    label = _label(item)
    if label in reported:
        return ""
    reported.add(label)
    return problem


def run_check(check: Check, trainer: Any, request: pytest.FixtureRequest) -> None:
    """Run one check against one trainer under Hypothesis and fail like a bug report."""
    if not isinstance(trainer, TrainerUnderTest):
        pytest.fail(
            f"the {FIXTURE} fixture returned {type(trainer).__name__}; "
            "expected nozero.testing.TrainerUnderTest",
            pytrace=False,
        )
    options: Options = request.config.stash[OPTIONS_KEY]
    problem = _registration_problem(trainer, request.node)
    if problem:
        pytest.fail(f"nozero_trainer [{_label(request.node)}]: {problem}", pytrace=False)
    counter = None if problem is not None else trainer.compile_count
    steps = run_steps(trainer, options.steps)
    compiled_before = counter() if counter else None  # the clean runs below count too
    with quiet_frameworks():
        calibration = _calibration(trainer, steps, options, request.node)
    if calibration.retraced:
        pytest.fail(f"trainer [{_label(request.node)}] {calibration.retraced}", pytrace=False)
    trial = Trial(
        trainer, steps, calibration.seconds, quiet=check.poisoned, watch_checks=check.watch_checks
    )

    def run_case(case: Any) -> None:
        outcome = trial.observe(case)
        if outcome.timed_out is not None:
            problem = _timeout_problem(trial, outcome.stuck_at, calibration.basis)
            raise RunTimedOut(problem, case)
        if outcome.reader_failure is not None:
            raise ReaderFailed(outcome.reader_failure)
        problem = outcome.malformed or check.judge(case, outcome, trial)
        if problem:
            raise CheckFailed(problem, case)

    # One database entry per item, not one shared by every trainer and check.
    run_case._hypothesis_internal_add_digest = request.node.nodeid.encode()  # type: ignore[attr-defined]
    for case in reversed(check.explicit(trainer, steps)):
        run_case = example(case=case)(run_case)
    test = given(case=check.cases(trainer, steps))(run_case)
    # Per-test settings: no global profile is loaded, so --hypothesis-profile and
    # --hypothesis-seed still apply; deadlines are off because compiling is slow.
    test = settings(
        max_examples=options.examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )(test)
    failure = None
    with warnings.catch_warnings(), quiet_frameworks():
        if check.poisoned:  # the check wrote the overflow in: its warnings are no news
            warnings.simplefilter("ignore", RuntimeWarning)
        try:
            test()
        except ReaderFailed as unread:
            failure = _reader_report(check, request.node, unread.failure)
        except RunTimedOut as timed_out:
            failure = _report(check, request.node, timed_out, trainer)
        except (CheckFailed, BaseExceptionGroup) as error:
            found = _failures(error)
            if not found:
                raise
            failure = _report(check, request.node, found[0], trainer)
    if failure is not None:  # failed outside the except block: no chained traceback
        pytest.fail(failure, pytrace=False)

    if counter is not None and compiled_before is not None:
        compiles = counter() - compiled_before
        if compiles > 1:
            pytest.fail(
                f"trainer compiled {compiles} times during the '{check.name}' check; "
                "shapes never change across examples, so it should compile at most once "
                "(does run() retrace on a Python value or a changing static argument? Or "
                "does its first state differ in dtype or weak type from what the step "
                "returns, as jnp.full(shape, 0.1) without dtype= does? Then the second step "
                "compiles again: give the first state the step's dtypes)",
                pytrace=False,
            )
