"""nozero's own code holds no zero-and-continue: the real CLI, run at the repository's
root as a user would, finds nothing. The test trainers that misbehave on purpose are
excluded by the repository's own ``[tool.nozero]``, and only they."""

from __future__ import annotations

from .conftest import REPO_ROOT, run_console_script


def test_linting_this_repository_finds_nothing(tmp_path):
    assert any((REPO_ROOT / "src").rglob("*.py"))
    result = run_console_script("lint", "--no-cache", cwd=REPO_ROOT, timeout=300)
    assert (result.code, result.out) == (0, ""), result.err
    assert result.err.startswith("nozero: All checks passed!"), result.err


def test_the_excluded_test_trainers_are_what_the_exclusion_hides():
    """Named as a directory the trainers are linted and flagged (the exclusion is there
    for them); named as a file, the command line says it was excluded."""
    trainers = REPO_ROOT / "tests" / "plugin" / "trainers"
    directory = run_console_script("lint", "--no-cache", str(trainers), cwd=REPO_ROOT)
    assert directory.code == 1 and "numpy_trainers.py" in directory.out
    named = run_console_script(
        "lint", "--no-cache", str(trainers / "numpy_trainers.py"), cwd=REPO_ROOT
    )
    assert (named.code, named.out) == (0, "")
    assert "numpy_trainers.py: excluded by" in named.err
