"""Benchmark ``nozero lint`` side by side with ruff, semgrep and Fixit on real code.

Corpus: the installed sources of jax, numpy, hypothesis, libcst, optax and pyarrow,
copied (``.py`` files only) into ``benchmarks/_work/corpus`` so that every tool sees the
same plain directory tree, free of any tool's ``site-packages`` or ``.venv`` special cases.

Peers: ruff (already in ``.venv``) runs ``--select F401`` as the floor; semgrep and Fixit 2
run one rule each that flags ``nan_to_num(...)`` calls (``benchmarks/peers/``). They are
installed into their own virtual environment, never ``.venv``; the script creates it on
first use, or beforehand:

    python3 -m venv benchmarks/_work/venv && benchmarks/_work/venv/bin/pip install fixit semgrep

Fixit takes over ten minutes on the whole corpus, so it runs on a deterministic sample
(every Nth file by path) and its time is extrapolated by line count, as printed.

A third row, the design floor, runs only what every run of this design must do: find the
files, read them, screen them, and parse the ones that pass (trigger text, not a test
module) with the standard library's ``ast`` (no facts, no flows, no libcst, no cache), on
as many processes as nozero uses. It shows how close to ruff a linter built on ``ast``
and libcst can come on this corpus.

The script also checks that nozero's findings are identical with and without its
shortcuts (``lint_source(..., shortcuts=False)``) on every file of the corpus.

Run: ``.venv/bin/python benchmarks/bench_lint.py`` (about five minutes on two cores).
``--cold-only [--runs N] [--baseline-src OTHER/src]...``: only the cold run of issue 23,
the corpus linted as one project with ``--no-cache``, ruff and nozero (and each other
checkout's code) in turn each round, wall and CPU time (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "_work"
CORPUS = WORK / "corpus"
PEERS_VENV = WORK / "venv"
PEERS = HERE / "peers"
SITE = REPO / ".venv" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
PACKAGES = ("jax", "numpy", "hypothesis", "libcst", "optax", "pyarrow")
# A pyproject.toml also makes the corpus its own project root for Fixit, whose file finder
# would otherwise apply this repository's .gitignore (which lists benchmarks/_work/).
FIXIT_CONFIG = """\
[tool.fixit]
root = true
disable = ["fixit.rules"]
enable = ["fixit_nan_to_num"]
"""
TARGETS = {
    "cold_vs_ruff": 3.0,
    "cold_vs_ruff_no_cache": 7.0,  # issue 23: one project, --no-cache
    "fixit_vs_cold": 100.0,
    "warm_s": 0.5,
    "hook_no_trigger_s": 0.1,
    "hook_trigger_s": 0.35,
    "hook_no_cache_extra_s": 0.1,
}
HOOK_REPO = WORK / "hook_repo"
# nozero runs as installed: with its modules' bytecode cached, which an environment that
# sets PYTHONDONTWRITEBYTECODE would otherwise recompile on every start (~0.07 s).
TOOL_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
HOOK_FILES = {
    "no trigger": ("util.py", "def add(a, b):\n    return a + b\n"),
    "with a trigger": (
        "train.py",
        "import jax\nimport jax.numpy as jnp\n\n\ndef train_step(params, batch):\n"
        "    grads = jax.grad(loss_fn)(params, batch)\n    grads = jnp.nan_to_num(grads)\n"
        "    return grads\n",
    ),
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def ensure_peers() -> Path:
    """The peers' venv, created on first use (pip shows its own progress)."""
    bin_dir = PEERS_VENV / "bin"
    if not ((bin_dir / "fixit").exists() and (bin_dir / "semgrep").exists()):
        log(f"installing fixit and semgrep into {PEERS_VENV.relative_to(REPO)}")
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run(
            [str(bin_dir / "pip"), "install", "-q", "fixit>=2.1", "semgrep>=1.80"], check=True
        )
    return bin_dir


def build_corpus() -> list[Path]:
    """Copy the packages' ``.py`` files once; returns the corpus files, sorted."""
    site = SITE / "site-packages"
    stamp = CORPUS / ".source"
    wanted = "\n".join(f"{name}:{(site / name).stat().st_mtime_ns}" for name in PACKAGES)
    if not (stamp.exists() and stamp.read_text() == wanted):
        log(f"copying the corpus from {site}")
        shutil.rmtree(CORPUS, ignore_errors=True)
        for name in PACKAGES:
            shutil.copytree(
                site / name,
                CORPUS / name,
                ignore=lambda d, names: [
                    n
                    for n in names
                    if not (n.endswith(".py") or (Path(d) / n).is_dir()) or n == "__pycache__"
                ],
            )
        stamp.write_text(wanted)
    # Fixit reads its one rule here; an empty .semgrepignore replaces semgrep's defaults.
    (CORPUS / "fixit.toml").unlink(missing_ok=True)
    (CORPUS / "pyproject.toml").write_text(FIXIT_CONFIG)
    (CORPUS / ".semgrepignore").write_text("")
    return sorted(CORPUS.rglob("*.py"))


def count_lines(files: Sequence[Path]) -> dict[Path, int]:
    return {path: path.read_bytes().count(b"\n") for path in files}


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float  # user + system seconds of the command and its children: load-independent


def timed(
    command: Sequence[str],
    *,
    cwd: Path = CORPUS,
    env: dict | None = TOOL_ENV,
    stdout=subprocess.DEVNULL,
) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(
        command, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode not in (0, 1):
        raise RuntimeError(f"{command[0]} failed ({completed.returncode}): {completed.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(elapsed, cpu)


def summary(timings: Sequence[Timing]) -> dict:
    """Median and best wall time and median CPU time: the machine is shared, so a run's
    wall time depends on what else runs; its CPU time much less."""
    return {
        "seconds": statistics.median(t.wall for t in timings),
        "best": min(t.wall for t in timings),
        "cpu": statistics.median(t.cpu for t in timings),
    }


def repeated(runs: int, label: str, command: Sequence[str], **kwargs) -> dict:
    timings = []
    for index in range(runs):
        timings.append(timed(command, **kwargs))
        log(
            f"{label} run {index + 1}/{runs}: {timings[-1].wall:.2f} s "
            f"({timings[-1].cpu:.2f} s CPU)"
        )
    return summary(timings)


def bench_ruff(runs: int) -> dict:
    ruff = REPO / ".venv" / "bin" / "ruff"
    base = [str(ruff), "check", "--isolated", "--no-cache", "--select", "F401", "--exit-zero"]
    shown = subprocess.run(
        [*base, "--show-files", "."], cwd=CORPUS, capture_output=True, text=True, check=True
    ).stdout
    files = sum(1 for line in shown.splitlines() if line.endswith(".py"))
    return {**repeated(runs, "ruff", [*base, "-q", "."]), "files": files}


def bench_nozero(runs: int) -> dict:
    nozero = REPO / ".venv" / "bin" / "nozero"
    cold, warm = [], []
    for index in range(runs):
        with tempfile.TemporaryDirectory(dir=WORK) as cache:
            command = [str(nozero), "lint", "--exit-zero", "--cache-dir", cache, "."]
            cold.append(timed(command))
            warm.append(timed(command))
            if index == runs - 1:  # the findings, from the cache just filled
                output = subprocess.run(
                    [*command, "--format", "json"],
                    cwd=CORPUS,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
        log(
            f"nozero run {index + 1}/{runs}: cold {cold[-1].wall:.2f} s "
            f"({cold[-1].cpu:.2f} s CPU), warm {warm[-1].wall:.2f} s"
        )
    from nozero.lint.config import load_settings
    from nozero.lint.files import FileFinder

    finder = FileFinder(load_settings(CORPUS).exclude_patterns())
    return {
        "files": sum(1 for _ in finder.find([CORPUS])),
        "cold": summary(cold),
        "warm": summary(warm),
        "findings": len(json.loads(output)),
    }


def _floor_chunk(paths: list[str]) -> int:
    import ast
    import gc

    from nozero.lint.files import is_test_module
    from nozero.lint.prefilter import concerns_nozero
    from nozero.lint.runner import decode_source

    gc.disable()  # as the engine parses
    parsed = 0
    for path in paths:
        try:
            text = decode_source(Path(path).read_bytes())
        except ValueError:
            continue
        if not is_test_module(path) and concerns_nozero(text, False):
            try:
                ast.parse(text)
            except SyntaxError:
                pass
            parsed += 1
    return parsed


def floor_main() -> int:
    """The design floor (see the module's docstring), run in a process of its own."""
    import multiprocessing

    from nozero.lint.config import load_settings
    from nozero.lint.files import FileFinder

    finder = FileFinder(load_settings(CORPUS).exclude_patterns())
    files = sorted(str(path) for path in finder.find([CORPUS]))
    jobs = os.cpu_count() or 1
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        parsed = sum(pool.map(_floor_chunk, [files[i::jobs] for i in range(jobs)]))
    print(f"{len(files)} files read and screened, {parsed} parsed")
    return 0


def bench_floor(runs: int) -> dict:
    return repeated(runs, "design floor", [sys.executable, __file__, "--floor"])


def bench_hook(runs: int, project: bool = False, baseline: Path | None = None) -> dict:
    """What the pre-commit hook costs: one changed file, in a git repository, named on
    the command line; the file is rewritten before every run (a cache miss for it, as
    after an edit), with the cache on and with ``--no-cache``.

    ``project``: the repository also holds the corpus (1,700+ modules, one project), and
    the cache is first filled by linting the whole tree, as a user's earlier run would.
    ``baseline``: the ``src`` directory of another checkout, run in turn with this one
    (each with a cache directory of its own), so both are timed under the same load."""
    nozero = REPO / ".venv" / "bin" / "nozero"
    shutil.rmtree(HOOK_REPO, ignore_errors=True)
    HOOK_REPO.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "."], cwd=HOOK_REPO, check=True)
    if project:
        shutil.copytree(CORPUS, HOOK_REPO / "lib", ignore=shutil.ignore_patterns("*.toml"))
    (HOOK_REPO / "pyproject.toml").write_text("[tool.nozero]\nignore = []\n")
    floor = [sys.executable, "-c", "pass"]
    results: dict = {"floor": repeated(runs, "python -c pass", floor, cwd=HOOK_REPO)}
    for name, text in HOOK_FILES.values():
        (HOOK_REPO / name).write_text(text)
    variants = {"": ({}, ".nozero_cache")}
    if baseline is not None:
        variants["baseline "] = ({"PYTHONPATH": str(baseline)}, ".nozero_cache_baseline")
    for env, cache in variants.values():
        # Once beforehand, so that every module's bytecode cache is written; with the
        # project, the whole tree, so that the cache is warm.
        warm_up = [str(nozero), "lint", "--exit-zero", "-q", "--cache-dir", cache]
        targets = ["."] if project else [n for n, _ in HOOK_FILES.values()]
        timed([*warm_up, *targets], cwd=HOOK_REPO, env={**TOOL_ENV, **env})
    for label, (name, text) in HOOK_FILES.items():
        for extra in ([], ["--no-cache"]):
            timings: dict[str, list[Timing]] = {variant: [] for variant in variants}
            for index in range(runs):
                for variant, (env, cache) in variants.items():
                    (HOOK_REPO / name).write_text(f"{text}REVISION = {index}\n")
                    caching = extra or ["--cache-dir", cache]
                    command = [str(nozero), "lint", *caching, name]
                    timings[variant].append(timed(command, cwd=HOOK_REPO, env={**TOOL_ENV, **env}))
            for variant, done in timings.items():
                key = f"{variant}{label}{' --no-cache' if extra else ''}"
                results[key] = summary(done)
                results[key]["worst"] = max(t.wall for t in done)
                log(f"hook, {key}: median {results[key]['seconds']:.3f} s")
    return results


def bench_cold(runs: int, baselines: Sequence[Path]) -> dict:
    """The cold run: the whole corpus linted as one project with ``--no-cache``, beside
    ``ruff check --select F401`` on the same tree (and the code of each of ``baselines``,
    other checkouts' ``src``), one run of each in turn, so that each round sees the same
    load."""
    ruff = REPO / ".venv" / "bin" / "ruff"
    nozero = REPO / ".venv" / "bin" / "nozero"
    lint = [str(nozero), "lint", "--exit-zero", "--no-cache", "."]
    commands = {
        "ruff": [str(ruff), "check", "--isolated", "--no-cache", "--select", "F401"]
        + ["--exit-zero", "-q", "."],
        "nozero": lint,
    }
    envs = {"ruff": TOOL_ENV, "nozero": TOOL_ENV}
    for baseline in baselines:
        commands[str(baseline)] = lint
        envs[str(baseline)] = {**TOOL_ENV, "PYTHONPATH": str(baseline)}
    findings = {}
    for name in commands:  # once each: the findings, and bytecode written
        if name != "ruff":
            out = subprocess.run(
                [*commands[name][:-1], "--format", "json", "."],
                cwd=CORPUS,
                env=envs[name],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            findings[name] = json.loads(out)
    timings: dict[str, list[Timing]] = {name: [] for name in commands}
    load = os.getloadavg()[0]
    for index in range(runs):
        for name, command in commands.items():
            timings[name].append(timed(command, env=envs[name]))
        log(
            f"cold round {index + 1}/{runs}: "
            + ", ".join(
                f"{n} {t[-1].wall:.2f} s ({t[-1].cpu:.2f} s CPU)" for n, t in timings.items()
            )
        )
    results = {name: summary(done) for name, done in timings.items()}
    for name, done in timings.items():
        results[name]["worst"] = max(t.wall for t in done)
    results["load"] = (load, os.getloadavg()[0])
    results["runs"] = runs
    results["findings"] = {name: len(found) for name, found in findings.items()}
    results["same_findings"] = len({json.dumps(f, sort_keys=True) for f in findings.values()}) <= 1
    return results


def cold_report(cold: dict) -> str:
    """The cold-run table: medians of the rounds, with best and worst, and the ratios to
    ruff's median wall and CPU time."""
    ruff = cold["ruff"]
    lines = [
        f"{cold['runs']} rounds, load average {cold['load'][0]:.1f} at the start and "
        f"{cold['load'][1]:.1f} at the end, {os.cpu_count()} cores.",
        "",
        "| tool | wall, median | best – worst | CPU, median | vs ruff, wall | vs ruff, CPU |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    names = {"ruff": "`ruff check --select F401`", "nozero": "`nozero lint --no-cache`"}
    names |= {key: f"the same, code of `{key}`" for key in cold["findings"] if key not in names}
    for key, name in names.items():
        t = cold[key]
        target = ""
        if key == "nozero":
            ratio = t["seconds"] / ruff["seconds"]
            verdict = "met" if ratio <= TARGETS["cold_vs_ruff_no_cache"] else "**missed**"
            target = f" (target ≤ {TARGETS['cold_vs_ruff_no_cache']:.0f}×: {verdict})"
        lines.append(
            f"| {name} | {t['seconds']:.2f} s | {t['best']:.2f} – {t['worst']:.2f} s | "
            f"{t['cpu']:.2f} s | {t['seconds'] / ruff['seconds']:.1f}×{target} | "
            f"{t['cpu'] / ruff['cpu']:.1f}× |"
        )
    same = "the same" if cold["same_findings"] else "**different**"
    counts = ", ".join(f"{n} {c}" for n, c in cold["findings"].items())
    lines += ["", f"Findings (default rules): {counts}; {same}."]
    return "\n".join(lines) + "\n"


def bench_semgrep(bin_dir: Path, runs: int) -> dict:
    command = [
        str(bin_dir / "semgrep"),
        "scan",
        "--config",
        str(PEERS / "semgrep_nan_to_num.yaml"),
        "--metrics=off",
        "--disable-version-check",
        "--no-git-ignore",
        "--jobs",
        "2",
        "--max-target-bytes",
        "0",
        "--project-root",
        ".",
        "--json",
        "--quiet",
        ".",
    ]
    timing = repeated(runs, "semgrep", command)
    report = json.loads(subprocess.run(command, cwd=CORPUS, capture_output=True, text=True).stdout)
    return {**timing, "files": len(report["paths"]["scanned"]), "matches": len(report["results"])}


def bench_fixit(bin_dir: Path, lines: dict[Path, int], every: int) -> dict:
    """Fixit on every ``every``-th file; its time is extrapolated to the whole corpus by
    lines after subtracting its start-up (measured on one empty file)."""
    env = {**TOOL_ENV, "PYTHONPATH": str(PEERS)}
    fixit = [str(bin_dir / "fixit"), "lint"]
    empty = CORPUS / "_empty_for_fixit.py"
    empty.write_text("")
    try:
        startup = timed([*fixit, empty.name], env=env).wall
    finally:
        empty.unlink()
    sample = sorted(lines)[::every]
    sample_lines = sum(lines[path] for path in sample)
    log(f"fixit on {len(sample)} files ({sample_lines:,} lines), start-up {startup:.2f} s")
    seconds = timed([*fixit, *(str(p.relative_to(CORPUS)) for p in sample)], env=env).wall
    total_lines = sum(lines.values())
    estimate = startup + (seconds - startup) * total_lines / sample_lines
    log(f"fixit sample: {seconds:.1f} s, whole corpus estimated {estimate:.0f} s")
    return {
        "sample_files": len(sample),
        "sample_lines": sample_lines,
        "sample_seconds": seconds,
        "startup": startup,
        "estimate": estimate,
    }


def _both_ways(path: str) -> tuple[str, list, list, float, float]:
    from nozero.lint.catalog import ALL_CODES
    from nozero.lint.engine import lint_source
    from nozero.lint.runner import decode_source

    codes = set(ALL_CODES)
    try:
        source = decode_source(Path(path).read_bytes())
    except ValueError:
        return path, [], [], 0.0, 0.0
    start = time.perf_counter()
    fast = lint_source(source, path, select=codes, shortcuts=True)
    middle = time.perf_counter()
    slow = lint_source(source, path, select=codes, shortcuts=False)
    return path, fast, slow, middle - start, time.perf_counter() - middle


def check_shortcuts(files: Sequence[Path]) -> dict:
    """Every rule, every file: findings with and without the shortcuts must be identical."""
    differing, findings = [], 0
    fast_total = slow_total = 0.0
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        outcomes = pool.map(_both_ways, [str(p) for p in files], chunksize=8)
        for done, (path, fast, slow, fast_s, slow_s) in enumerate(outcomes, 1):
            findings += len(fast)
            fast_total += fast_s
            slow_total += slow_s
            if fast != slow:
                differing.append(path)
            if done % 200 == 0 or done == len(files):
                log(f"shortcut check {done}/{len(files)} files, {len(differing)} differing")
    return {
        "files": len(files),
        "findings": findings,
        "differing": differing,
        "cpu_with": fast_total,
        "cpu_without": slow_total,
    }


def report(
    corpus: dict,
    ruff: dict,
    nozero: dict,
    floor: dict,
    semgrep: dict,
    fixit: dict,
    shortcuts: dict | None,
    hook: dict,
) -> str:
    cold, warm = nozero["cold"], nozero["warm"]
    cold_vs_ruff = cold["seconds"] / ruff["seconds"]
    fixit_vs_cold = fixit["estimate"] / cold["seconds"]

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    def row(name: str, t: dict, target: str = "") -> str:
        return (
            f"| {name} | {t['seconds']:.2f} s | {t['best']:.2f} s | {t['cpu']:.2f} s | "
            f"{t['seconds'] / ruff['seconds']:.1f}× | {target} |"
        )

    lines = [
        f"Corpus: {corpus['files']:,} files, {corpus['lines']:,} lines "
        f"({', '.join(PACKAGES)}); {os.cpu_count()} cores, load average at start "
        f"{corpus['load']:.1f}. {corpus['runs']} runs of each tool but Fixit.",
        "",
        "| tool | wall, median | wall, best | CPU, median | vs ruff (wall) | target |",
        "| --- | --- | --- | --- | --- | --- |",
        row("`ruff check --select F401` (floor)", ruff),
        row(
            "`nozero lint`, cold (empty cache)",
            cold,
            f"≤ {TARGETS['cold_vs_ruff']:.0f}× ruff: "
            f"{verdict(cold_vs_ruff <= TARGETS['cold_vs_ruff'])}",
        ),
        row("design floor: read, screen, `ast.parse` of the files that pass", floor),
        row(
            "`nozero lint`, warm (cache filled)",
            warm,
            f"≤ {TARGETS['warm_s']} s: {verdict(warm['seconds'] <= TARGETS['warm_s'])}",
        ),
        row("semgrep, one pattern rule", semgrep),
        f"| Fixit 2, one rule (estimated from {fixit['sample_files']} files) | "
        f"{fixit['estimate']:.0f} s | | | {fixit['estimate'] / ruff['seconds']:.0f}× | "
        f"nozero cold {fixit_vs_cold:.0f}× faster, target ≥ {TARGETS['fixit_vs_cold']:.0f}×: "
        f"{verdict(fixit_vs_cold >= TARGETS['fixit_vs_cold'])} |",
        "",
        f"Files seen: nozero {nozero['files']:,}, ruff {ruff['files']:,}, "
        f"semgrep {semgrep['files']:,}. Fixit ran {fixit['sample_files']} files "
        f"({fixit['sample_lines']:,} lines) in {fixit['sample_seconds']:.1f} s with "
        f"{fixit['startup']:.1f} s start-up; the whole-corpus figure scales the rest by lines.",
        f"The design floor alone is {floor['seconds'] / ruff['seconds']:.1f}× ruff "
        f"({floor['cpu']:.2f} s CPU): a cold run of a linter that parses the trigger files "
        "with the standard library's `ast` cannot be faster than that, whatever its rules cost.",
        f"nozero reported {nozero['findings']} findings (all its default rules); semgrep's "
        f"pattern matched {semgrep['matches']} `nan_to_num` calls, whatever their argument.",
    ]
    if shortcuts is not None:
        same = not shortcuts["differing"]
        lines.append(
            f"Shortcuts on vs off, every rule on every file: {shortcuts['findings']} findings, "
            f"{'identical' if same else 'DIFFERENT in ' + str(len(shortcuts['differing']))} "
            f"({'no file differs' if same else ', '.join(shortcuts['differing'][:5])}); "
            f"engine CPU {shortcuts['cpu_with']:.0f} s with the shortcuts, "
            f"{shortcuts['cpu_without']:.0f} s without."
        )
    return "\n".join(lines) + "\n\n" + hook_report(hook)


def hook_report(hook: dict) -> str:
    """The pre-commit latency table: medians of the runs, with best and worst."""

    def verdict(seconds: float, target: float) -> str:
        return f"≤ {target} s: " + ("met" if seconds <= target else "**missed**")

    runs = []
    for label, target in (
        ("no trigger", "hook_no_trigger_s"),
        ("with a trigger", "hook_trigger_s"),
    ):
        cached, uncached = hook[label], hook[f"{label} --no-cache"]
        extra = uncached["seconds"] - cached["seconds"]
        runs.append(
            (
                f"one changed file, {label}, cache on",
                cached,
                verdict(cached["seconds"], TARGETS[target]),
            )
        )
        runs.append(
            (
                f"the same, `--no-cache` (adds {extra:+.3f} s)",
                uncached,
                verdict(extra, TARGETS["hook_no_cache_extra_s"]),
            )
        )
    lines = [
        "| pre-commit run | wall, median | best – worst | CPU, median | target |",
        "| --- | --- | --- | --- | --- |",
        f"| `python -c pass` (floor) | {hook['floor']['seconds']:.3f} s | "
        f"{hook['floor']['best']:.3f} s | {hook['floor']['cpu']:.3f} s | |",
    ]
    for label in ("no trigger", "with a trigger"):
        for extra in ("", " --no-cache"):
            base = hook.get(f"baseline {label}{extra}")
            if base is not None:
                name = f"baseline, one changed file, {label}{extra or ', cache on'}"
                runs.append((name, base, ""))
    lines += [
        f"| {name} | {t['seconds']:.3f} s | {t['best']:.3f} – {t['worst']:.3f} s | "
        f"{t['cpu']:.3f} s | {target} |"
        for name, t, target in runs
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="repeats of the fast tools")
    parser.add_argument(
        "--fixit-every", type=int, default=20, help="Fixit lints every Nth file of the corpus"
    )
    parser.add_argument("--skip-shortcut-check", action="store_true")
    parser.add_argument("--hook-runs", type=int, default=20, help="repeats of each hook run")
    parser.add_argument(
        "--hook-only",
        action="store_true",
        help="only the pre-commit latency (seconds, not minutes)",
    )
    parser.add_argument(
        "--hook-project",
        action="store_true",
        help="time the hook inside a project of the corpus's 1,700+ modules, cache warm",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        action="append",
        help="the src/ of another checkout, timed in turn with this one (the hook: the "
        "first given; the cold run: each, repeatable)",
    )
    parser.add_argument(
        "--cold-only",
        action="store_true",
        help="only the cold run (--no-cache, one project) beside ruff, rounds in turn",
    )
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor:
        return floor_main()
    if args.cold_only:
        WORK.mkdir(exist_ok=True)
        build_corpus()
        cold = bench_cold(args.runs, args.baseline_src or [])
        text = cold_report(cold)
        (WORK / "cold_results.md").write_text(text)
        print("\n" + text)
        return 0 if cold["same_findings"] else 1

    WORK.mkdir(exist_ok=True)
    if args.hook_project:
        build_corpus()
    baseline = args.baseline_src[0] if args.baseline_src else None
    hook = bench_hook(args.hook_runs, args.hook_project, baseline)
    if args.hook_only:
        print("\n" + hook_report(hook))
        return 0
    bin_dir = ensure_peers()
    files = build_corpus()
    lines = count_lines(files)
    corpus = {
        "files": len(files),
        "lines": sum(lines.values()),
        "runs": args.runs,
        "load": os.getloadavg()[0],
    }
    log(f"corpus: {corpus['files']:,} files, {corpus['lines']:,} lines")

    ruff = bench_ruff(args.runs)
    nozero = bench_nozero(args.runs)
    floor = bench_floor(args.runs)
    semgrep = bench_semgrep(bin_dir, args.runs)
    fixit = bench_fixit(bin_dir, lines, args.fixit_every)
    shortcuts = None if args.skip_shortcut_check else check_shortcuts(files)

    text = report(corpus, ruff, nozero, floor, semgrep, fixit, shortcuts, hook)
    (WORK / "lint_results.md").write_text(text)
    print("\n" + text)
    return 1 if shortcuts and shortcuts["differing"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
