"""The docs site and the README: the strict mkdocs build passes (and fails on a broken link
or a page left out of the nav), every recipe block is run by a test, and the README stays
the short front door whose figures are all on the benchmark pages."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from docs_blocks import DOCS, code_blocks, python_blocks

ROOT = DOCS.parent
README = ROOT / "README.md"
TESTS = ROOT / "tests"


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)]
        + ["-d", str(site)],
        capture_output=True,
        text=True,
        timeout=180,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_site_builds_under_strict(tmp_path):
    done = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "plugin" / "recipes" / "equinox" / "index.html").exists()
    assert (tmp_path / "site" / "rules" / "NZ101" / "index.html").exists()


def test_strict_build_fails_on_a_broken_link_and_a_page_left_out_of_the_nav(tmp_path):
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("changelog.d"))
    (tmp_path / "docs" / "orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](no-such-page.md)\n", encoding="utf-8")
    done = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert "orphan.md" in done.stderr and "no-such-page.md" in done.stderr, done.stderr


def test_python_blocks_reads_fenced_blocks_by_language_and_first_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```python\n# conftest.py\nx = 1\n```\n\n```yaml\na: 1\n```\n\n"
        "- item\n\n  ```python\n  y = 2\n  ```\n\n```\nplain\n```\n",
        encoding="utf-8",
    )
    assert python_blocks(page) == ["# conftest.py\nx = 1\n", "y = 2\n"]
    assert python_blocks(page, first_line_prefix="# conftest.py") == ["# conftest.py\nx = 1\n"]
    assert code_blocks(page, "yaml") == ["a: 1\n"]
    with pytest.raises(FileNotFoundError):
        python_blocks(tmp_path / "missing.md")


def _declared_runs() -> Counter[str]:
    """Every test module's RUNS_DOCS_BLOCKS, summed per page (read without importing)."""
    runs: Counter[str] = Counter()
    for path in TESTS.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "RUNS_DOCS_BLOCKS"
                for target in node.targets
            ):
                runs.update(ast.literal_eval(node.value))
    return runs


def test_every_python_block_of_every_recipe_page_is_run_by_a_test():
    runs = _declared_runs()
    recipes = sorted(DOCS.glob("plugin/recipes/*.md"))
    assert recipes
    for page in recipes:
        name = page.relative_to(DOCS).as_posix()
        assert runs[name] == len(python_blocks(page)), (
            f"{name} has {len(python_blocks(page))} python blocks; tests declare {runs[name]} "
            "run (RUNS_DOCS_BLOCKS, see tests/docs_blocks.py)"
        )
    for name in runs:
        assert (DOCS / name).is_file(), f"RUNS_DOCS_BLOCKS names {name}, which is no page"


def test_the_getting_started_example_prints_what_its_comment_says(tmp_path):
    [block] = python_blocks("getting-started.md")
    done = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "4 nan 1.5\n"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_is_short_and_its_first_screen_has_the_rule_install_and_the_two_commands():
    lines = _readme().splitlines()
    assert len(lines) <= 200
    first_screen = "\n".join(lines[:50])
    assert "stops training for investigation" in first_screen
    assert "pip install ." in first_screen
    assert ".venv/bin/nozero-train demo" in first_screen
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci_test = re.search(r"^\.venv/bin/python -m pytest .*$", ci, re.M).group(0)
    assert f".venv/bin/pip install -e '.[test]' && {ci_test}" in first_screen


def test_readme_speaks_of_the_project_not_its_history():
    text = _readme()
    for word in ("this release", "tests/", "../", "2026-", "pip install nozero"):
        assert word not in text, word
    assert not re.search(r"\bnow\b", text)


def test_the_readme_lint_example_reports_what_it_shows(tmp_path):
    text = _readme()
    [block] = python_blocks(README, first_line_prefix="# train.py")
    shown = re.search(r"\$ nozero lint train.py\n +(.+)\n", text).group(1)
    (tmp_path / "train.py").write_text(block, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from nozero.cli import main; sys.exit(main())"]
        + ["lint", "--no-cache", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [shown]


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _readme()):
        assert (ROOT / target).exists(), target


def test_every_readme_benchmark_figure_is_on_its_page():
    section = _readme().split("## Benchmarks")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| [")]
    assert len(rows) >= 5
    for row in rows:
        page = (ROOT / re.search(r"\]\(([^)]+)\)", row).group(1)).read_text(encoding="utf-8")
        figures = re.findall(r"\d[\d,]*\.\d+|\d+/\d+|\d+%", re.sub(r"\]\([^)]+\)", "]", row))
        assert figures, row
        for figure in figures:
            assert figure in page, f"{figure} is not on the page of: {row}"
