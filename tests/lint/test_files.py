"""File discovery: the hand-written gitignore matching agrees with git itself, and the
exclude rules apply the way docs/lint/configuration.md says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nozero.lint.files import DEFAULT_EXCLUDE, FileFinder, compile_patterns, is_ignored

from .conftest import GOOD_SOURCE, write

# Each line exercises one piece of gitignore syntax.
GITIGNORE = """\
# comment line, then a blank one

*.gen.py
/top_only.py
build/
docs/**/conf.py
**/fixtures/*.py
!fixtures/keep.py
data?.py
case[0-9].py
\\#hash.py
logs/
!logs/
"""
NESTED_GITIGNORE = """\
local.py
!/re_included.gen.py
sub/*.py
"""

FILES = [
    "a.py",
    "x.gen.py",
    "top_only.py",
    "pkg/top_only.py",
    "build/b.py",
    "pkg/build/c.py",
    "docs/conf.py",
    "docs/en/conf.py",
    "docs/en/deep/conf.py",
    "docs/en/other.py",
    "fixtures/f.py",
    "fixtures/keep.py",
    "t/fixtures/g.py",
    "data1.py",
    "data10.py",
    "case5.py",
    "casex.py",
    "#hash.py",
    "logs/l.py",
    "pkg/local.py",
    "pkg/re_included.gen.py",
    "pkg/sub/s.py",
    "pkg/sub/deeper/d.py",
    "other/local.py",
]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, timeout=60
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q", ".")
    write(tmp_path / ".gitignore", GITIGNORE)
    write(tmp_path / "pkg" / ".gitignore", NESTED_GITIGNORE)
    for name in FILES:
        write(tmp_path / name, GOOD_SOURCE)
    return tmp_path


def test_walk_agrees_with_git_on_what_is_ignored(repo: Path):
    # Files git would show as untracked are exactly the ones not ignored.
    expected = sorted(
        line
        for line in _git(repo, "ls-files", "--others", "--exclude-standard").splitlines()
        if line.endswith(".py")
    )
    found = sorted(path.relative_to(repo).as_posix() for path in FileFinder([]).find([repo]))
    assert found == expected
    # The fixture really exercises both outcomes.
    assert 5 < len(found) < len(FILES)


def test_walk_agrees_with_git_below_a_subdirectory(repo: Path):
    expected = sorted(
        line
        for line in _git(repo / "pkg", "ls-files", "--others", "--exclude-standard").splitlines()
        if line.endswith(".py")
    )
    found = sorted(
        path.relative_to(repo / "pkg").as_posix() for path in FileFinder([]).find([repo / "pkg"])
    )
    assert found == expected


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "ignored"),
    [
        ("*.py", "a/b/c.py", False, True),
        ("/c.py", "a/c.py", False, False),
        ("a/c.py", "a/c.py", False, True),
        ("a/c.py", "x/a/c.py", False, False),
        ("build/", "build", True, True),
        ("build/", "build", False, False),
        ("a/**/z.py", "a/z.py", False, True),
        ("a/**/z.py", "a/b/c/z.py", False, True),
        ("**/z.py", "q/z.py", False, True),
        ("a/**", "a/b/c.py", False, True),
        ("c?.py", "c1.py", False, True),
        ("c?.py", "c12.py", False, False),
        ("c[!0-9].py", "c1.py", False, False),
        ("c[!0-9].py", "cx.py", False, True),
        ("\\!bang.py", "!bang.py", False, True),
        ("trailing.py   ", "trailing.py", False, True),
    ],
)
def test_pattern_syntax(tmp_path: Path, pattern: str, path: str, is_dir: bool, ignored: bool):
    patterns = compile_patterns([pattern], tmp_path)
    assert is_ignored(patterns, (tmp_path / path).as_posix(), is_dir) is ignored


def test_last_matching_pattern_wins_and_negation_re_includes(tmp_path: Path):
    patterns = compile_patterns(["*.py", "!keep*.py", "keep_not.py"], tmp_path)
    assert is_ignored(patterns, f"{tmp_path}/drop.py", False)
    assert not is_ignored(patterns, f"{tmp_path}/keep.py", False)
    assert is_ignored(patterns, f"{tmp_path}/keep_not.py", False)


def test_default_excludes_skip_virtualenvs_and_caches(tmp_path: Path):
    for name in ("a.py", ".venv/lib/x.py", "venv/y.py", "node_modules/z.py", "__pycache__/c.py"):
        write(tmp_path / name, GOOD_SOURCE)
    finder = FileFinder(compile_patterns(DEFAULT_EXCLUDE, tmp_path))
    assert [p.relative_to(tmp_path).as_posix() for p in finder.find([tmp_path])] == ["a.py"]


def test_a_named_directory_is_linted_even_inside_an_excluded_one(tmp_path: Path):
    write(tmp_path / ".venv" / "lib" / "pkg" / "m.py", GOOD_SOURCE)
    finder = FileFinder(compile_patterns(DEFAULT_EXCLUDE, tmp_path))
    named = tmp_path / ".venv" / "lib" / "pkg"
    assert list(finder.find([named])) == [named / "m.py"]


def test_a_named_file_is_still_subject_to_exclude(tmp_path: Path):
    # pre-commit names files one by one: configured excludes must still hold.
    generated = write(tmp_path / "generated" / "deep" / "g.py", GOOD_SOURCE)
    kept = write(tmp_path / "src" / "k.py", GOOD_SOURCE)
    finder = FileFinder(compile_patterns(["generated/"], tmp_path))
    assert list(finder.find([generated, kept])) == [kept]


def test_each_file_is_reported_once_whatever_the_overlap(tmp_path: Path):
    file = write(tmp_path / "pkg" / "m.py", GOOD_SOURCE)
    found = list(FileFinder([]).find([tmp_path, tmp_path / "pkg", file]))
    assert found == [tmp_path / "pkg" / "m.py"]


def test_a_missing_path_raises_naming_it(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nope.py"):
        list(FileFinder([]).find([tmp_path / "nope.py"]))


@pytest.mark.parametrize(
    "lines",
    [
        list(DEFAULT_EXCLUDE),
        [*DEFAULT_EXCLUDE, "gen*/", "a/b", "x.py", "dir/", "[ab]c", "we\\*rd"],
        ["build", "!build", "dist/"],  # a negation: the order decides, no set
    ],
    ids=["defaults", "mixed", "negated"],
)
def test_a_walk_excludes_what_the_patterns_match(tmp_path: Path, lines: list[str]):
    """The walk looks plain names up in a set: the same answers as the patterns one by
    one, for files and directories, inside and outside the patterns' base."""
    from nozero.lint.files import _Excludes

    patterns = compile_patterns(lines, tmp_path)
    excluded = _Excludes(patterns)
    names = [*DEFAULT_EXCLUDE, "gen1", "a", "b", "x.py", "dir", "ac", "cc", "we*rd", "venv2"]
    for parent in (tmp_path.as_posix(), f"{tmp_path.as_posix()}/sub", "/elsewhere"):
        for name in names:
            for tail in ("", "/b"):
                for is_dir in (True, False):
                    path = f"{parent}/{name}{tail}"
                    assert excluded(path, is_dir) == is_ignored(patterns, path, is_dir), path


def test_a_symlink_back_up_the_tree_is_walked_once_and_a_dangling_one_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """``ln -s . loop`` (or a link to a parent) would otherwise be walked until the OS
    refuses ("too many levels of symbolic links") and stop the whole run."""
    from nozero.cli import main

    write(tmp_path / "pkg" / "train.py", "import torch\nloss = torch.nan_to_num(loss)\n")
    (tmp_path / "pkg" / "up").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "loop").symlink_to(".", target_is_directory=True)
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    found = FileFinder(compile_patterns(DEFAULT_EXCLUDE, tmp_path)).find([tmp_path])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["pkg/train.py"]
    assert main(["lint", "--no-cache", str(tmp_path)]) == 1
    assert capsys.readouterr().out.count("NZ101") == 1
