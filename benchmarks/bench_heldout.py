"""Score ``nozero lint`` on the held-out sample: repositories nobody tuned the rules to.

``heldout_repos.tsv`` lists each repository with the commit that was read and its domain;
``heldout_labels.tsv`` holds the sites found by reading that code before the linter ran
on it (repository, commit, path, line, label, reason: TP, DEBATABLE-ctc or FP, which
reads "neither"). Each repository is linted whole, as its own project (so switches and
helpers that cross files count), with the default rules and with ``--select ALL``.

- precision (default rules) = findings within ``--tolerance`` lines of a TP site, over
  all findings except those on debatable sites (a finding on no labelled site counts
  against precision, as a finding on a "neither" site does);
- TP recall = TP sites with a default finding within the tolerance;
- debatable found = debatable sites with a finding when every rule is on.

Findings about the file rather than its NaN handling (``NZ0xx``: a file that does not
parse, a ``noqa`` comment) are listed apart and left out of precision. ``--span`` also
counts a finding inside the ``if`` statement that starts at a site's line (the site
``if not flag: <step> else: continue`` is reported at its ``continue``).

Samples: the first is ``heldout_repos.tsv`` and ``heldout_labels.tsv``; a later one,
named ``NAME``, is ``heldout_NAME_repos.tsv`` and ``heldout_NAME_labels.tsv``
(``--sample NAME``; ``--sample v2`` is the second, seven repositories; ``--sample v3``
the third, seven more).

Sources: ``benchmarks/_work/heldout/<owner>+<name>/`` (git-ignored). A missing tree is
downloaded from GitHub's archive of the recorded commit (Python files only).

Run: ``.venv/bin/python benchmarks/bench_heldout.py [--sample v2]`` (``--src DIR`` runs
another checkout's ``src``, e.g. the code before a change, for a side-by-side figure).
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import os
import subprocess
import sys
import tarfile
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "_work" / "heldout"
NOZERO = Path(sys.executable).parent / "nozero"
MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


@dataclass(frozen=True)
class Site:
    repository: str
    path: str
    line: int
    label: str
    reason: str


def read_tsv(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """The rows of ``path``; a row that lacks a column is an error naming file and row."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    for number, row in enumerate(rows, 2):
        missing = [c for c in columns if not row.get(c)]
        if missing:
            raise SystemExit(f"{path}:{number}: missing {', '.join(missing)}")
    return rows


def sample_files(name: str | None) -> tuple[Path, Path]:
    """The repositories and labels files of a sample; a missing one is an error naming it."""
    stem = "heldout" if name is None else f"heldout_{name}"
    files = (HERE / f"{stem}_repos.tsv", HERE / f"{stem}_labels.tsv")
    for path in files:
        if not path.is_file():
            raise SystemExit(f"--sample {name}: {path} does not exist")
    return files


def tree_of(repository: str, commit: str) -> Path:
    """The repository's Python files at ``commit``, downloaded once."""
    tree = WORK / repository.replace("/", "+")
    if tree.exists():
        return tree
    url = f"https://codeload.github.com/{repository}/tar.gz/{commit}"
    print(f"downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=300) as response:
        data = response.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            name = member.name.split("/", 1)[-1]
            if member.isfile() and (name.endswith(".py") or name in MARKERS):
                target = tree / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.extractfile(member).read())
    return tree


def lint(tree: Path, every_rule: bool, src: Path | None) -> list[dict]:
    """The findings of one whole-tree run, without a cache (a cold, honest run)."""
    if not any((tree / marker).exists() for marker in MARKERS):
        (tree / "pyproject.toml").write_text("[tool.nozero]\n")  # the project's root
    command = [str(NOZERO), "lint", "--no-cache", "--exit-zero", "--format", "json", "."]
    if every_rule:
        command += ["--select", "ALL"]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    done = subprocess.run(
        command, cwd=tree, capture_output=True, text=True, timeout=3600, env=env, check=True
    )
    # A tree holds the repository's regular files (as the download above keeps them). A
    # tree built another way may hold symlinks (icefall links one recipe's modules into
    # the others): a linked file repeats its target's findings, on no labelled site.
    return [f for f in json.loads(done.stdout) if not _linked(tree, f["path"])]


def _linked(tree: Path, path: str) -> bool:
    """Is ``path`` (relative to ``tree``) a symlink, or inside a symlinked directory?"""
    full = tree.absolute() / path
    inside = [full, *full.parents][: len(Path(path).parts)]  # up to, not including, tree
    return any(p.is_symlink() for p in inside)


def statement_end(tree: Path, site: Site) -> int:
    """The last line of the ``if`` statement that starts at the site's line (the line
    itself when there is none or the file does not parse)."""
    try:
        module = ast.parse((tree / site.path).read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return site.line
    ends = [
        node.end_lineno or node.lineno
        for node in ast.walk(module)
        if isinstance(node, ast.If) and node.lineno == site.line
    ]
    return max(ends, default=site.line)


def near(finding: dict, site: Site, tolerance: int, ends: dict[Site, int] | None = None) -> bool:
    """Is the finding within ``tolerance`` lines of the site (or of its statement)?"""
    last = ends.get(site, site.line) if ends else site.line
    return (
        finding["path"] == site.path
        and site.line - tolerance <= finding["line"] <= last + tolerance
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tolerance", type=int, default=3, help="lines either side of a site")
    parser.add_argument("--src", type=Path, help="run this src/ directory's nozero instead")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--sample", help="score heldout_SAMPLE_{repos,labels}.tsv (e.g. v2)")
    parser.add_argument(
        "--span", action="store_true", help="a site also covers the if statement at its line"
    )
    args = parser.parse_args(argv)

    repos_file, labels_file = sample_files(args.sample)
    repos = read_tsv(repos_file, ("repository", "commit", "domain"))
    sites: dict[str, list[Site]] = defaultdict(list)
    for row in read_tsv(labels_file, ("repository", "commit", "path", "line", "label", "reason")):
        sites[row["repository"]].append(
            Site(row["repository"], row["path"], int(row["line"]), row["label"], row["reason"])
        )
    totals = defaultdict(int)
    lines = []
    for repo in repos:
        name = repo["repository"]
        tree = tree_of(name, repo["commit"])
        default = lint(tree, False, args.src)
        every = lint(tree, True, args.src)
        about_files = [f for f in default if f["code"].startswith("NZ0")]
        default = [f for f in default if not f["code"].startswith("NZ0")]
        labelled = sites.get(name, [])
        ends = {s: statement_end(tree, s) for s in labelled} if args.span else None

        def on(finding: dict, group: list[Site], ends: dict[Site, int] | None = ends) -> bool:
            return any(near(finding, s, args.tolerance, ends) for s in group)

        tp_sites = [s for s in labelled if s.label == "TP"]
        debatable = [s for s in labelled if s.label.startswith("DEBATABLE")]
        found_tp = [s for s in tp_sites if any(on(f, [s]) for f in default)]
        found_debatable = [s for s in debatable if any(on(f, [s]) for f in every)]
        counted = [f for f in default if not on(f, debatable)]
        correct = [f for f in counted if on(f, tp_sites)]
        wrong = [f for f in counted if f not in correct]
        for key, value in (
            ("findings", len(counted)),
            ("correct", len(correct)),
            ("tp_sites", len(tp_sites)),
            ("tp_found", len(found_tp)),
            ("debatable", len(debatable)),
            ("debatable_found", len(found_debatable)),
        ):
            totals[key] += value
        lines.append(
            f"{name} ({repo['domain']}): TP {len(found_tp)}/{len(tp_sites)}, "
            f"findings {len(counted)} ({len(correct)} on TP sites), "
            f"debatable {len(found_debatable)}/{len(debatable)}"
        )
        lines += [f"    not on a TP site: {f['path']}:{f['line']} {f['code']}" for f in wrong]
        lines += [f"    about the file: {f['path']}:{f['line']} {f['code']}" for f in about_files]
        unlabelled = Counter(
            f["code"]
            for f in every
            if f not in default and not f["code"].startswith("NZ0") and not on(f, labelled)
        )
        if unlabelled:
            counts = ", ".join(f"{code} x{n}" for code, n in sorted(unlabelled.items()))
            lines.append(f"    every rule on, on no labelled site: {counts}")
        missed = [s for s in tp_sites if s not in found_tp]
        lines += [f"    missed TP: {s.path}:{s.line} ({s.reason})" for s in missed]
    precision = totals["correct"] / totals["findings"] if totals["findings"] else 1.0
    recall = totals["tp_found"] / totals["tp_sites"] if totals["tp_sites"] else 1.0
    lines.append(
        f"precision {precision:.2f} ({totals['correct']}/{totals['findings']}); "
        f"TP recall {recall:.2f} ({totals['tp_found']}/{totals['tp_sites']}); "
        f"debatable found {totals['debatable_found']}/{totals['debatable']} (every rule on); "
        f"tolerance ±{args.tolerance} lines"
        + (", or within the site's if statement" if args.span else "")
    )
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps({**totals, "precision": precision, "recall": recall}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
