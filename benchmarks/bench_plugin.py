"""Benchmark ``pytest --nozero`` on the reference trainer with the default settings.

Two measurements, each beside its baseline:

1. Whole run: wall time of a fresh ``python -m pytest --nozero`` process that collects
   only the four check items of the reference trainer (JAX import and the one
   compilation included), beside the same command with ``-p no:nozero`` (pytest start-up
   alone). Target: the whole contract run under 60 s on 2 cores.
2. Per check: examples run (explicit and generated), seconds and examples/s, beside the
   trainer's own ``run()`` on prebuilt clean batches of the same shape, without Hypothesis
   (runs/s). The ratio is what Hypothesis drawing, shrinking and judging add per example.

Run: ``.venv/bin/python benchmarks/bench_plugin.py`` (about a minute on two cores).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from nozero.plugin.options import DEFAULT_EXAMPLES, DEFAULT_STEPS
from nozero_trainer import contract_target

REFERENCE = "nozero_trainer.contract_target:reference_trainer"
CHECKS = ("halts", "overflow", "no_false_alarm", "never_continue")
TARGET_S = 60.0
CALLS: list[tuple[str, float]] = []  # (check item, seconds) of each run() call


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def counted_reference_trainer():
    """The reference trainer, with each ``run()`` call recorded (factory for the ini key)."""
    trainer = contract_target.reference_trainer()
    run = trainer.run

    def counted(batches):
        start = time.perf_counter()
        try:
            return run(batches)
        finally:
            CALLS.append((Recorder.current, time.perf_counter() - start))

    return type(trainer)(**{**trainer.__dict__, "run": counted})


class Recorder:
    """A pytest plugin object: which item is running, and how long each item took."""

    current = ""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        Recorder.current = nodeid.split("::")[-1].split("[")[0]

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call":
            name = report.nodeid.split("::")[-1].split("[")[0]
            self.seconds[name] = report.duration


def whole_run(empty_dir: Path) -> tuple[float, float]:
    """Seconds for ``pytest --nozero`` and for bare pytest start-up, fresh processes."""
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(empty_dir)]
    start = time.perf_counter()
    done = subprocess.run(
        [*base, "--nozero", f"--nozero-trainer={REFERENCE}"], capture_output=True, text=True
    )
    contract_s = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"the contract run failed:\n{done.stdout}\n{done.stderr}")
    startups = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([*base, "-p", "no:nozero"], capture_output=True)  # exit 5: no tests
        startups.append(time.perf_counter() - start)
    return contract_s, statistics.median(startups)


def per_check(empty_dir: Path) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """Seconds per check item and the item of every ``run()`` call, in-process."""
    # The ini factory imports this file as ``bench_plugin``, not ``__main__``: record there.
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_plugin

    recorder = bench_plugin.Recorder()
    args = ["-q", "-p", "no:cacheprovider", "--nozero", str(empty_dir)]
    args += ["--nozero-trainer=bench_plugin:counted_reference_trainer"]
    args += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    status = pytest.main(args, plugins=[recorder])
    if status != 0:
        raise SystemExit(f"the in-process contract run failed with exit status {status}")
    return recorder.seconds, bench_plugin.CALLS


def baseline_runs_per_second(runs: int = 60) -> float:
    """The trainer alone: ``run()`` on prebuilt clean batches, already compiled."""
    trainer = contract_target.reference_trainer()
    batches = [trainer.clean_batches(seed, DEFAULT_STEPS) for seed in range(runs)]
    trainer.run(batches[0])  # compile outside the timing
    start = time.perf_counter()
    for sequence in batches:
        trainer.run(sequence)
    return runs / (time.perf_counter() - start)


def main() -> None:
    log(f"defaults: {DEFAULT_EXAMPLES} examples per check, {DEFAULT_STEPS} steps per run")
    with tempfile.TemporaryDirectory() as scratch:
        empty = Path(scratch)
        log("whole run: fresh pytest --nozero process vs pytest start-up alone ...")
        contract_s, startup_s = whole_run(empty)
        log(f"  pytest --nozero {contract_s:.1f} s; start-up alone {startup_s:.2f} s")
        log("per check (in-process, counting run() calls) ...")
        seconds, calls = per_check(empty)
    log("baseline: the trainer's own run() without Hypothesis ...")
    baseline = baseline_runs_per_second()

    print()
    print("| measurement | nozero | baseline | ratio |")
    print("| --- | --- | --- | --- |")
    verdict = "meets" if contract_s < TARGET_S else "MISSES"
    print(
        f"| whole `pytest --nozero` run (s) | {contract_s:.1f} | {startup_s:.2f} (start-up) "
        f"| {contract_s / startup_s:.1f}x ({verdict} the {TARGET_S:.0f} s target) |"
    )
    # The process's first run() call compiles the step: shown apart from the rates.
    compiled_in, compile_s = calls[0]
    print(f"| one compilation (first run() call, in {compiled_in}) (s) | {compile_s:.2f} | | |")
    for name in CHECKS:
        durations = [seconds for item, seconds in calls if item == name]
        examples, spent = len(durations), seconds[name]
        if name == compiled_in:
            examples, spent = examples - 1, spent - compile_s
        rate = examples / spent
        print(
            f"| {name}: {len(durations)} examples in {seconds[name]:.2f} s (examples/s) "
            f"| {rate:.0f} | {baseline:.0f} (bare runs/s) | {baseline / rate:.1f}x |"
        )


if __name__ == "__main__":
    main()
