"""nozero's own sources hold no zero-and-continue code: the real CLI finds nothing."""

from __future__ import annotations

from .conftest import REPO_ROOT, run_console_script


def test_linting_this_repository_src_finds_nothing(tmp_path):
    src = REPO_ROOT / "src"
    assert any(src.rglob("*.py"))
    result = run_console_script(
        "lint", str(src), "--no-cache", cwd=REPO_ROOT, timeout=300
    )
    assert (result.code, result.out, result.err) == (0, "", "")
