"""The on-disk cache: warm runs reuse results, and no change to a file, the rules or the
configuration is ever answered with stale findings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nozero.lint.cache import Cache, config_key
from nozero.lint.catalog import DEFAULT_CODES
from nozero.lint.config import Selection
from nozero.lint.runner import Runner

from .conftest import BAD_SOURCE, GOOD_SOURCE, SYNTAX_ERROR_SOURCE, write

HOUR_NS = 3600 * 10**9


def runner(cache_dir: Path, enabled=None, require_reason: bool = False, jobs: int = 1) -> Runner:
    codes = frozenset(enabled or DEFAULT_CODES)
    cache = Cache(cache_dir, config_key(codes, require_reason))
    return Runner(Selection(codes), require_reason, cache, jobs)


def age(path: Path, ns: int = HOUR_NS) -> None:
    """Back-date a file, as an edit made long before the lint run."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns - ns, stat.st_mtime_ns - ns))


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    paths = [
        write(tmp_path / "src" / f"m{i}.py", [BAD_SOURCE, GOOD_SOURCE, SYNTAX_ERROR_SOURCE][i % 3])
        for i in range(12)
    ]
    for path in paths:
        age(path)
    return paths


def test_a_warm_run_serves_every_file_from_the_cache(tmp_path, files, nan_code):
    cold = runner(tmp_path / "cache", jobs=2).lint_files(files)
    assert cold.from_cache == 0
    assert {f.code for f in cold.findings} == {"NZ001", nan_code}
    warm = runner(tmp_path / "cache").lint_files(files)
    assert warm.from_cache == len(files)
    assert warm.findings == cold.findings


def test_a_file_rewritten_within_the_same_tick_is_re_linted(tmp_path, nan_code):
    path = write(tmp_path / "train.py", BAD_SOURCE)
    first = runner(tmp_path / "cache").lint_files([path])
    assert [f.code for f in first.findings] == [nan_code]
    stat = path.stat()
    # Same size, same mtime, different content: only the content hash can tell.
    fixed = BAD_SOURCE.replace("nan_to_num", "clip_value")
    assert len(fixed) == len(BAD_SOURCE)
    path.write_text(fixed, encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = runner(tmp_path / "cache").lint_files([path])
    assert second.findings == []


def test_an_edited_file_is_re_linted_and_an_untouched_one_is_not(tmp_path, files, nan_code):
    runner(tmp_path / "cache").lint_files(files)
    files[0].write_text(GOOD_SOURCE + "# edited\n", encoding="utf-8")  # was BAD_SOURCE
    report = runner(tmp_path / "cache").lint_files(files)
    assert report.from_cache == len(files) - 1
    assert str(files[0]) not in {f.path for f in report.findings}


def test_a_touched_but_unchanged_file_costs_a_hash_not_a_lint(tmp_path, files):
    cold = runner(tmp_path / "cache").lint_files(files)
    for path in files:
        path.touch()
    warm = runner(tmp_path / "cache").lint_files(files)
    assert warm.from_cache == len(files)
    assert warm.findings == cold.findings


def test_results_follow_content_to_a_new_path(tmp_path, nan_code):
    original = write(tmp_path / "a.py", BAD_SOURCE)
    runner(tmp_path / "cache").lint_files([original])
    copy = write(tmp_path / "b" / "copy.py", BAD_SOURCE)
    report = runner(tmp_path / "cache").lint_files([copy])
    assert report.from_cache == 1
    assert [(f.path, f.code) for f in report.findings] == [(str(copy), nan_code)]


def test_configuration_is_part_of_the_key(tmp_path, files, nan_code):
    only_syntax = runner(tmp_path / "cache", enabled={"NZ001"}).lint_files(files)
    assert {f.code for f in only_syntax.findings} == {"NZ001"}
    everything = runner(tmp_path / "cache").lint_files(files)
    assert everything.from_cache == 0
    assert {f.code for f in everything.findings} == {"NZ001", nan_code}
    keys = {
        config_key({"NZ001"}, False),
        config_key({"NZ001"}, True),
        config_key({"NZ001", nan_code}, False),
    }
    assert len(keys) == 3


def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path, files):
    cold = runner(tmp_path / "cache").lint_files(files)
    [cache_file] = (tmp_path / "cache").glob("results-*.json")
    cache_file.write_text("{not json", encoding="utf-8")
    again = runner(tmp_path / "cache").lint_files(files)
    assert again.from_cache == 0 and again.findings == cold.findings
    assert runner(tmp_path / "cache").lint_files(files).from_cache == len(files)


def test_cli_cache_dir_and_no_cache(lint, tmp_path):
    write(tmp_path / "a.py", SYNTAX_ERROR_SOURCE)
    first = lint("--no-cache")
    assert not (tmp_path / ".nozero_cache").exists()
    second = lint("--cache-dir", "elsewhere")
    assert list((tmp_path / "elsewhere").glob("results-*.json"))
    assert (tmp_path / "elsewhere" / ".gitignore").read_text().strip().endswith("*")
    third = lint()
    assert list((tmp_path / ".nozero_cache").glob("results-*.json"))
    assert first.out == second.out == third.out != ""


def test_warm_cli_run_is_fast_on_many_files(lint, tmp_path):
    for index in range(300):
        write(tmp_path / "pkg" / f"m{index:03d}.py", GOOD_SOURCE + f"\nX = {index}\n")
    for path in (tmp_path / "pkg").iterdir():
        age(path)
    assert lint().code == 0
    start = time.perf_counter()
    assert lint().code == 0
    assert time.perf_counter() - start < 1.0


def test_a_warm_run_never_imports_libcst(tmp_path):
    for index in range(5):
        write(tmp_path / f"m{index}.py", BAD_SOURCE + f"X = {index}\n")
        age(tmp_path / f"m{index}.py")  # an edit made within the run's second is read again
    probe = (
        "import sys; from nozero.cli import main; code = main(['lint', '.']);"
        " print(code, 'libcst' in sys.modules)"
    )

    def run() -> str:
        return subprocess.run(
            [sys.executable, "-c", probe],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.split("\n")[-2]

    assert run() == "1 True"  # cold: the engine (and libcst) lint the files
    assert run() == "1 False"  # warm: findings, rule names and codes all from the cache
