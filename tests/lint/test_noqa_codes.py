"""NZ003: a ``# noqa`` naming an unknown nozero code, or a code that suppresses nothing."""

from __future__ import annotations

import pytest

from nozero.lint.check import check_source

from .conftest import BAD_SOURCE, run_console_script, write

NAN_LINE = "jnp.nan_to_num(grads)"


def _with_comment(comment: str, line: str = NAN_LINE) -> str:
    return BAD_SOURCE.replace(line, f"{line}  # {comment}")


def _codes(source: str, path: str = "train.py", **options: object) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in check_source(source, path, **options)]


def test_an_unknown_code_is_reported_through_the_command_line(tmp_path):
    write(tmp_path / "train.py", _with_comment("noqa: NZ999 padded rows"))
    result = run_console_script("lint", "train.py", cwd=tmp_path, timeout=120)
    assert result.code == 1
    [nan, unknown] = result.lines()
    assert " NZ101 " in nan  # NZ999 suppresses nothing
    assert unknown.startswith("train.py:7:36: NZ003 noqa names an unknown code: NZ999")


@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        ("noqa: NZ101 padded rows", []),
        ("noqa: NZ1 a prefix", []),
        ("noqa: NZ101, NZ999 one good one bad", [(7, "NZ003")]),
        ("noqa: NZ201 wrong rule", [(7, "NZ101"), (7, "NZ003")]),
        ("noqa: E501", [(7, "NZ101")]),  # another tool's code: not nozero's to judge
        ("noqa", []),  # a bare comment covers everything and is left alone
        ("noqa: NZ999, NZ003 kept on purpose", [(7, "NZ101")]),
    ],
)
def test_which_comments_are_reported(comment, expected):
    assert _codes(_with_comment(comment)) == expected


def test_a_comment_left_behind_on_a_clean_line_is_unused():
    source = _with_comment("noqa: NZ101 why", "return grads")
    findings = check_source(source, "train.py")
    assert [(f.line, f.code) for f in findings] == [(7, "NZ101"), (8, "NZ003")]
    assert findings[1].message == "unused noqa: no NZ101 finding on this line"


def test_a_comment_on_the_first_line_of_a_multiline_statement_is_used():
    source = BAD_SOURCE.replace(
        "    grads = jnp.nan_to_num(grads)\n",
        "    grads = (  # noqa: NZ101 padded rows\n        jnp.nan_to_num(grads)\n    )\n",
    )
    assert "(  # noqa" in source
    assert _codes(source) == []


def test_a_comment_for_a_rule_not_selected_is_judged_by_that_rule():
    """Stale or not does not depend on --select: NZ101 still fires here, so the comment
    is in use; a comment for a rule with nothing to say is stale either way."""
    used = _with_comment("noqa: NZ101 padded rows")
    assert _codes(used, select={"NZ003"}) == []
    stale = _with_comment("noqa: NZ101 why", "return grads")
    assert _codes(stale, select={"NZ003"}) == [(8, "NZ003")]


def test_in_a_test_module_only_unknown_codes_are_reported():
    """No rule runs in a test module, so no comment there can be judged unused."""
    source = _with_comment("noqa: NZ101 why", "return grads")
    assert _codes(source, "test_train.py") == []
    unknown = _with_comment("noqa: NZ777 why", "return grads")
    assert _codes(unknown, "test_train.py") == [(8, "NZ003")]


def test_a_file_without_trigger_text_still_gets_its_unknown_codes_reported(tmp_path):
    write(tmp_path / "util.py", "def add(a, b):\n    return a + b  # noqa: NZ9\n")
    result = run_console_script("lint", "--no-cache", cwd=tmp_path, timeout=120)
    assert result.code == 1
    assert result.lines() == [
        "util.py:2:19: NZ003 noqa names an unknown code: NZ9 (see `nozero rules`)"
    ]
    ignored = run_console_script("lint", "--no-cache", "--ignore", "NZ003", cwd=tmp_path)
    assert (ignored.code, ignored.out) == (0, "")
