"""Score ``nozero lint`` on released ML code bases against a hand-labelled table.

The development set is seven PyPI releases, pinned in ``PACKAGES``. Each is fetched with
``pip download --no-deps`` into ``benchmarks/_work/realworld/`` (git-ignored) and
extracted once. The linter runs twice per package, as a user would run it at the
package's root: with the default rules, and with ``--select ALL``. Its findings are
matched to ``benchmarks/realworld_labels.tsv`` (package, version, path, line, label,
reason) by path and line, within ``--tolerance`` lines (default 2).

- precision (default rules) = TP / (TP + FP + unlabelled + duplicate) over findings;
  a finding that matches no labelled site counts against precision until it is labelled,
  and a second finding on an already matched site is a duplicate (one site, one report).
  Findings on DEBATABLE sites are counted apart and left out of precision.
- recall of TP sites: TP sites with a finding from the default rules, over all TP sites.
- recall of debatable sites: DEBATABLE and DEBATABLE-ctc sites with a finding when
  every rule is on, over all of them.

Run: ``.venv/bin/python benchmarks/bench_realworld.py`` (first run downloads ~25 MB).
``--package NAME`` (repeatable) runs only those packages and writes its results to
``benchmarks/_work/`` instead of ``benchmarks/realworld_results.json``.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "_work" / "realworld"
LABELS = HERE / "realworld_labels.tsv"
RESULTS = HERE / "realworld_results.json"
PARTIAL_RESULTS = HERE / "_work" / "realworld_results.json"
NOZERO = Path(sys.executable).parent / "nozero"
LABEL_KINDS = ("TP", "DEBATABLE", "DEBATABLE-ctc", "FP")
DEBATABLE_KINDS = ("DEBATABLE", "DEBATABLE-ctc")
COLUMNS = ("package", "version", "path", "line", "label", "reason")
# An empty [tool.nozero] table: the packages' own settings and this repository's do not
# apply, so every package sees the linter's defaults.
CONFIG_TEXT = "[tool.nozero]\n"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    artifact: str  # "sdist" or "wheel": whichever holds the Python sources worth reading

    @property
    def tree(self) -> Path:
        return WORK / f"{self.name}-{self.version}"


# Releases closest to the commits the development set was read at (fairseq: its last
# release, 0.12.2, is far older than the commit read). sdists where they carry tests,
# examples or benchmarks that the wheel leaves out.
PACKAGES = (
    Package("deepspeed", "0.16.4", "sdist"),
    Package("fairseq", "0.12.2", "sdist"),
    Package("optax", "0.2.8", "wheel"),
    Package("flax", "0.12.8", "sdist"),
    Package("transformers", "5.16.0", "sdist"),
    Package("pytorch-lightning", "2.6.6", "wheel"),
    Package("timm", "1.0.29", "sdist"),
)


@dataclass(frozen=True)
class Site:
    package: str
    path: str
    line: int
    label: str
    reason: str
    row: int  # line number in the TSV, for messages


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    code: str
    message: str


@dataclass
class Score:
    """How one lint run's findings fall on the labelled sites of one package."""

    findings: int = 0
    by_label: Counter = field(default_factory=Counter)  # TP, FP, DEBATABLE..., unlabelled
    found_sites: set = field(default_factory=set)
    unlabelled: list = field(default_factory=list)


def log(message: str) -> None:
    print(f"[realworld {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- fetching the releases


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def fetch(package: Package) -> Path:
    """The extracted release, downloaded and unpacked on first use (never half-written:
    it is unpacked beside its final place and renamed into it)."""
    if (package.tree / ".complete").exists():
        return package.tree
    downloads = WORK / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    only = "--no-binary" if package.artifact == "sdist" else "--only-binary"
    spec = f"{package.name}=={package.version}"
    log(f"pip download {spec} ({package.artifact})")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-q",
            only,
            package.name,
            spec,
            "-d",
            str(downloads),
        ],
        check=True,
    )
    suffix = ".tar.gz" if package.artifact == "sdist" else ".whl"
    matches = [
        p
        for p in downloads.iterdir()
        if p.name.endswith(suffix)
        and p.name.count("-") >= 1
        and _normalised(p.name.split("-")[0]) == _normalised(package.name)
        and p.name.split("-")[1].removesuffix(suffix) == package.version
    ]
    if len(matches) != 1:
        raise SystemExit(f"{spec}: expected one {suffix} in {downloads}, found {matches}")
    staging = Path(tempfile.mkdtemp(prefix=f".{package.name}-", dir=WORK))
    try:
        if package.artifact == "sdist":
            with tarfile.open(matches[0]) as archive:
                archive.extractall(staging, filter="data")
            (top,) = staging.iterdir()  # an sdist holds one NAME-VERSION/ directory
        else:
            top = staging / "tree"
            with zipfile.ZipFile(matches[0]) as archive:
                archive.extractall(top)
        (top / ".complete").write_text(f"{matches[0].name}\n")
        shutil.rmtree(package.tree, ignore_errors=True)
        top.rename(package.tree)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return package.tree


def python_files(tree: Path) -> list[Path]:
    """The release's Python sources (``.py`` and ``.pyi``, as the linter takes them)."""
    return sorted(p for p in tree.rglob("*.py*") if p.suffix in (".py", ".pyi") and p.is_file())


# ---------------------------------------------------------------- the labelled table


def read_labels(path: Path, packages: Sequence[Package]) -> dict[str, list[Site]]:
    """The labelled sites per package; a malformed row stops the run naming the row."""
    pinned = {p.name: p for p in PACKAGES}
    sites: dict[str, list[Site]] = {p.name: [] for p in packages}
    seen: dict[tuple[str, str, str], int] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if tuple(header or ()) != COLUMNS:
            raise SystemExit(f"{path}:1: header must be {' '.join(COLUMNS)}, got {header}")
        for number, row in enumerate(reader, start=2):
            where = f"{path}:{number}"
            if len(row) != len(COLUMNS):
                raise SystemExit(f"{where}: {len(row)} fields, expected {len(COLUMNS)}")
            name, version, file, line, label, reason = row
            if name not in pinned:
                raise SystemExit(f"{where}: package {name!r} is not in the development set")
            if version != pinned[name].version:
                raise SystemExit(
                    f"{where}: version {version} but {name} is pinned at {pinned[name].version}"
                )
            if label not in LABEL_KINDS:
                raise SystemExit(f"{where}: label {label!r}, expected one of {LABEL_KINDS}")
            if not line.isdigit() or int(line) < 1:
                raise SystemExit(f"{where}: line {line!r} is not a positive number")
            if not reason.strip():
                raise SystemExit(f"{where}: the reason is empty")
            if (name, file, line) in seen:
                raise SystemExit(
                    f"{where}: {file}:{line} is labelled twice (also row {seen[name, file, line]})"
                )
            seen[name, file, line] = number
            if name in sites:
                sites[name].append(Site(name, file, int(line), label, reason, number))
    return sites


def check_sites_exist(tree: Path, sites: Iterable[Site]) -> None:
    """Every labelled site names a file of the release and a line inside it."""
    lengths: dict[str, int] = {}
    for site in sites:
        if site.path not in lengths:
            file = tree / site.path
            if not file.is_file():
                raise SystemExit(f"{LABELS}:{site.row}: {site.path} is not in {tree.name}")
            lengths[site.path] = file.read_bytes().count(b"\n") + 1
        if site.line > lengths[site.path]:
            raise SystemExit(
                f"{LABELS}:{site.row}: {site.path} has {lengths[site.path]} lines, not {site.line}"
            )


# ---------------------------------------------------------------- running the linter


def _every_rule_selector() -> tuple[list[str], str]:
    """``--select ALL`` when the CLI knows it, else every code ``nozero rules`` lists."""
    probe = subprocess.run(
        [str(NOZERO), "lint", "--select", "ALL", "--no-cache", "--exit-zero", "-"],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode == 0:
        return ["--select", "ALL"], "--select ALL"
    listing = subprocess.run(
        [str(NOZERO), "rules"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    codes = [line.split()[0] for line in listing.splitlines()[1:] if line.strip()]
    log("this nozero does not accept --select ALL; selecting every code `nozero rules` lists")
    return ["--select", ",".join(codes)], "every code listed by `nozero rules`"


def lint(tree: Path, selector: Sequence[str], config: Path) -> tuple[list[Finding], dict]:
    """The findings of one cold run at the package root, and its wall and CPU time."""
    command = [
        str(NOZERO),
        "lint",
        "--format",
        "json",
        "--no-cache",
        "--exit-zero",
        "--config",
        str(config),
        *selector,
        ".",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise SystemExit(
            f"nozero lint failed in {tree} ({completed.returncode}):\n{completed.stderr}"
        )
    rows = json.loads(completed.stdout)
    findings = [
        Finding(r["path"].removeprefix("./"), r["line"], r["code"], r["message"]) for r in rows
    ]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return findings, {"wall_s": wall, "cpu_s": cpu}


def lint_timed(
    tree: Path, selector: Sequence[str], config: Path, runs: int
) -> tuple[list[Finding], dict]:
    """``runs`` cold runs: their findings (which must agree) and the median wall and CPU
    time with the wall-time range; the machine may be shared, so one run can mislead."""
    findings, timings = None, []
    for _ in range(runs):
        found, timing = lint(tree, selector, config)
        if findings is not None and found != findings:
            raise SystemExit(f"nozero lint gave different findings on two runs in {tree}")
        findings = found
        timings.append(timing)
    walls = [t["wall_s"] for t in timings]
    return findings or [], {
        "wall_s": round(statistics.median(walls), 2),
        "wall_range_s": [round(min(walls), 2), round(max(walls), 2)],
        "cpu_s": round(statistics.median(t["cpu_s"] for t in timings), 2),
        "runs": runs,
    }


# ---------------------------------------------------------------- scoring


def windows(tree: Path, sites: Sequence[Site], tolerance: int) -> dict[Site, range]:
    """The lines a finding may sit on to match each site: the labelled statement, and
    ``tolerance`` lines either side. A labelled ``if`` or ``except`` covers its body, so a
    reaction such as the ``return`` under ``if overflow:`` may be reported on its own line."""
    statement_ends: dict[str, dict[int, int]] = {}
    result = {}
    for site in sites:
        if site.path not in statement_ends:
            statement_ends[site.path] = _statement_ends(tree / site.path)
        end = statement_ends[site.path].get(site.line, site.line)
        result[site] = range(site.line - tolerance, end + tolerance + 1)
    return result


def _statement_ends(file: Path) -> dict[int, int]:
    """First line -> last line of each simple statement, and of the body of each ``if``
    and ``except`` (empty when the file does not parse)."""
    try:
        module = ast.parse(file.read_bytes())
    except (SyntaxError, ValueError):
        return {}
    compound = (
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.For,
        ast.AsyncFor,
        ast.While,
        ast.With,
        ast.AsyncWith,
        ast.Try,
        ast.Match,
    )
    ends: dict[int, int] = {}
    for node in ast.walk(module):
        if isinstance(node, (ast.If, ast.ExceptHandler)):
            end = node.body[-1].end_lineno
        elif isinstance(node, ast.stmt) and not isinstance(node, compound):
            end = node.end_lineno
        else:
            continue
        ends[node.lineno] = max(ends.get(node.lineno, 0), end or node.lineno)
    return ends


def score(findings: Sequence[Finding], windows: dict[Site, range]) -> Score:
    """Each finding takes the nearest labelled site whose window holds it; pairs are made
    nearest first, one finding per site; the rest near a taken site are duplicates."""
    result = Score(findings=len(findings))
    by_path: dict[str, list[Site]] = {}
    for site in windows:
        by_path.setdefault(site.path, []).append(site)
    pairs = sorted(
        (abs(site.line - finding.line), index, site.row, site)
        for index, finding in enumerate(findings)
        for site in by_path.get(finding.path, ())
        if finding.line in windows[site]
    )
    taken_findings: set[int] = set()
    near_taken: set[int] = set()
    for _, index, _, site in pairs:
        if index in taken_findings:
            continue
        if site in result.found_sites:
            near_taken.add(index)
            continue
        taken_findings.add(index)
        result.found_sites.add(site)
        result.by_label[site.label] += 1
    for index, finding in enumerate(findings):
        if index in taken_findings:
            continue
        if index in near_taken:
            result.by_label["duplicate"] += 1
        else:
            result.by_label["unlabelled"] += 1
            result.unlabelled.append(finding)
    return result


def _ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 3) if denominator else None


def metrics(default: Score, every: Score, sites: Sequence[Site]) -> dict:
    counts = Counter(site.label for site in sites)
    tp_sites = [s for s in sites if s.label == "TP"]
    debatable_sites = [s for s in sites if s.label in DEBATABLE_KINDS]
    tp, fp = default.by_label["TP"], default.by_label["FP"]
    against = fp + default.by_label["unlabelled"] + default.by_label["duplicate"]
    tp_found = sum(s in default.found_sites for s in tp_sites)
    debatable_found = sum(s in every.found_sites for s in debatable_sites)
    return {
        "labelled_sites": dict(sorted(counts.items())),
        "default": {
            "findings": default.findings,
            **{k: default.by_label[k] for k in ("TP", "FP", "unlabelled", "duplicate")},
            "debatable": sum(default.by_label[k] for k in DEBATABLE_KINDS),
            "precision": _ratio(tp, tp + against),
            "tp_sites_found": tp_found,
            "tp_sites": len(tp_sites),
            "tp_recall": _ratio(tp_found, len(tp_sites)),
        },
        "all": {
            "findings": every.findings,
            **{k: every.by_label[k] for k in ("TP", "FP", "unlabelled", "duplicate")},
            "debatable": sum(every.by_label[k] for k in DEBATABLE_KINDS),
            "debatable_sites_found": debatable_found,
            "debatable_sites": len(debatable_sites),
            "debatable_recall": _ratio(debatable_found, len(debatable_sites)),
            "tp_recall": _ratio(sum(s in every.found_sites for s in tp_sites), len(tp_sites)),
        },
        "missed_tp": [_site_row(s) for s in tp_sites if s not in default.found_sites],
        "missed_debatable": [_site_row(s) for s in debatable_sites if s not in every.found_sites],
        "unlabelled_default": [asdict(f) for f in default.unlabelled],
        "unlabelled_all": [asdict(f) for f in every.unlabelled],
    }


def _site_row(site: Site) -> dict:
    return {"path": site.path, "line": site.line, "label": site.label, "reason": site.reason}


def overall(per_package: dict[str, dict]) -> dict:
    """Sums over the packages, ratios recomputed from the sums."""
    total: Counter = Counter()
    for entry in per_package.values():
        for run in ("default", "all"):
            for key, value in entry[run].items():
                if isinstance(value, int):
                    total[f"{run}.{key}"] += value
        total["files"] += entry["files"]
        total["lines"] += entry["lines"]
        for run in ("default", "all"):
            total[f"{run}.wall_s"] += entry["time"][run]["wall_s"]
            total[f"{run}.cpu_s"] += entry["time"][run]["cpu_s"]
    tp = total["default.TP"]
    against = total["default.FP"] + total["default.unlabelled"] + total["default.duplicate"]
    return {
        "files": total["files"],
        "lines": total["lines"],
        "default_findings": total["default.findings"],
        "default_TP": tp,
        "default_FP": total["default.FP"],
        "default_unlabelled": total["default.unlabelled"],
        "default_duplicate": total["default.duplicate"],
        "default_debatable": total["default.debatable"],
        "precision": _ratio(tp, tp + against),
        "tp_sites_found": total["default.tp_sites_found"],
        "tp_sites": total["default.tp_sites"],
        "tp_recall": _ratio(total["default.tp_sites_found"], total["default.tp_sites"]),
        "debatable_sites_found": total["all.debatable_sites_found"],
        "debatable_sites": total["all.debatable_sites"],
        "debatable_recall": _ratio(
            total["all.debatable_sites_found"], total["all.debatable_sites"]
        ),
        "all_findings": total["all.findings"],
        "all_unlabelled": total["all.unlabelled"],
        "default_wall_s": round(total["default.wall_s"], 2),
        "all_wall_s": round(total["all.wall_s"], 2),
        "default_cpu_s": round(total["default.cpu_s"], 2),
        "all_cpu_s": round(total["all.cpu_s"], 2),
    }


# ---------------------------------------------------------------- report


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def table(results: dict) -> str:
    head = (
        "| package | version | files | lines | findings | TP | FP | unlabelled | dup | debatable "
        "| precision | TP recall | debatable recall (ALL) | s wall (CPU): default / ALL |"
    )
    lines = [head, "| --- " * (head.count("|") - 1) + "|"]
    for name, entry in results["packages"].items():
        d, a, t = entry["default"], entry["all"], entry["time"]
        lines.append(
            f"| {name} | {entry['version']} | {entry['files']:,} | {entry['lines']:,} "
            f"| {d['findings']} | {d['TP']} | {d['FP']} | {d['unlabelled']} | {d['duplicate']} "
            f"| {d['debatable']} "
            f"| {_fmt(d['precision'])} | {d['tp_sites_found']}/{d['tp_sites']} "
            f"| {a['debatable_sites_found']}/{a['debatable_sites']} "
            f"| {t['default']['wall_s']:.1f} ({t['default']['cpu_s']:.1f}) "
            f"/ {t['all']['wall_s']:.1f} ({t['all']['cpu_s']:.1f}) |"
        )
    o = results["overall"]
    lines.append(
        f"| **all** | | {o['files']:,} | {o['lines']:,} | {o['default_findings']} "
        f"| {o['default_TP']} | {o['default_FP']} | {o['default_unlabelled']} "
        f"| {o['default_duplicate']} | {o['default_debatable']} | {_fmt(o['precision'])} "
        f"| {o['tp_sites_found']}/{o['tp_sites']} ({_fmt(o['tp_recall'])}) "
        f"| {o['debatable_sites_found']}/{o['debatable_sites']} ({_fmt(o['debatable_recall'])}) "
        f"| {o['default_wall_s']:.1f} ({o['default_cpu_s']:.1f}) "
        f"/ {o['all_wall_s']:.1f} ({o['all_cpu_s']:.1f}) |"
    )
    return "\n".join(lines)


def details(results: dict, missed: bool) -> str:
    """What to look at next: unlabelled findings (every rule on) and, with ``missed``,
    the labelled TP and debatable sites that no finding reached."""
    keys = [("unlabelled_all", "unlabelled")]
    if missed:
        keys += [("missed_tp", "missed TP"), ("missed_debatable", "missed debatable")]
    out = []
    for name, entry in results["packages"].items():
        for key, title in keys:
            for item in entry[key]:
                what = item.get("code") or item.get("label")
                text = item.get("message") or item.get("reason")
                out.append(f"{name}: {title}: {item['path']}:{item['line']} {what} {text}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--package",
        action="append",
        choices=[p.name for p in PACKAGES],
        help="run only this package (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--details", action="store_true", help="also list the labelled sites no finding reached"
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="cold runs per package and rule set (median time)"
    )
    parser.add_argument(
        "--tolerance",
        type=int,
        default=2,
        help="lines a finding may sit from its labelled site (default 2)",
    )
    args = parser.parse_args(argv)
    packages = [p for p in PACKAGES if not args.package or p.name in args.package]

    labels = read_labels(LABELS, packages)
    WORK.mkdir(parents=True, exist_ok=True)
    config = WORK / "nozero.toml"
    config.write_text(CONFIG_TEXT)
    every, every_how = _every_rule_selector()
    results: dict = {
        "linter": subprocess.run(
            [str(NOZERO), "--version"], capture_output=True, text=True
        ).stdout.strip(),
        "every_rule": every_how,
        "tolerance_lines": args.tolerance,
        "cpus": os.cpu_count(),
        "packages": {},
    }
    for package in packages:
        tree = fetch(package)
        sites = labels[package.name]
        check_sites_exist(tree, sites)
        files = python_files(tree)
        log(f"{package.name} {package.version}: {len(files)} files, linting")
        default_findings, default_time = lint_timed(tree, [], config, args.runs)
        all_findings, all_time = lint_timed(tree, every, config, args.runs)
        entry = {
            "version": package.version,
            "artifact": package.artifact,
            "files": len(files),
            "lines": sum(f.read_bytes().count(b"\n") for f in files),
            "time": {"default": default_time, "all": all_time},
        }
        near = windows(tree, sites, args.tolerance)
        entry.update(metrics(score(default_findings, near), score(all_findings, near), sites))
        results["packages"][package.name] = entry
    results["overall"] = overall(results["packages"])

    target = RESULTS if not args.package else PARTIAL_RESULTS
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(table(results))
        print(
            f"\nevery rule on: {every_how}; line tolerance ±{args.tolerance}; "
            f"results in {target.relative_to(HERE.parent)}"
        )
        extra = details(results, args.details)
        if extra:
            print("\n" + extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
