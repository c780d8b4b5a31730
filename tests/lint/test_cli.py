"""``nozero lint``, ``nozero rules`` and ``nozero rule`` through the real command line."""

from __future__ import annotations

import re
from pathlib import Path

from nozero.lint.rules import ALL_RULES

from .conftest import (
    BAD_LINE,
    BAD_SOURCE,
    GOOD_SOURCE,
    SYNTAX_ERROR_SOURCE,
    run_console_script,
    write,
)

FINDING_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>NZ\d{3}) .+$")


def test_finding_is_reported_as_path_line_col_code_message(tmp_path, nan_code):
    write(tmp_path / "train.py", BAD_SOURCE)
    result = run_console_script("lint", "train.py", cwd=tmp_path)
    assert result.code == 1, result.err
    [line] = result.lines()
    match = FINDING_LINE.match(line)
    assert match, line
    assert match["path"] == "train.py"
    assert match["code"] == nan_code
    assert int(match["line"]) == BAD_LINE


def test_clean_code_exits_zero_and_prints_nothing(tmp_path):
    write(tmp_path / "train.py", GOOD_SOURCE)
    result = run_console_script("lint", cwd=tmp_path)
    assert (result.code, result.out, result.err) == (0, "", "")


def test_exit_zero_still_prints_the_findings(lint, tmp_path, nan_code):
    write(tmp_path / "train.py", BAD_SOURCE)
    result = lint("--exit-zero", "train.py")
    assert result.code == 0
    assert f" {nan_code} " in result.out


def test_directories_are_walked_recursively_and_only_python_files_linted(lint, tmp_path, nan_code):
    write(tmp_path / "pkg" / "deep" / "er" / "train.py", BAD_SOURCE)
    write(tmp_path / "pkg" / "stub.pyi", SYNTAX_ERROR_SOURCE)
    write(tmp_path / "pkg" / "notes.txt", BAD_SOURCE)
    write(tmp_path / "pkg" / "script", BAD_SOURCE)
    result = lint()
    paths = sorted(line.split(":")[0] for line in result.lines())
    assert paths == ["pkg/deep/er/train.py", "pkg/stub.pyi"]
    assert result.code == 1


def test_a_file_that_does_not_parse_is_a_finding_with_the_parser_position(lint, tmp_path):
    write(tmp_path / "broken.py", SYNTAX_ERROR_SOURCE)
    write(tmp_path / "fine.py", GOOD_SOURCE)
    result = lint()
    assert result.code == 1
    [line] = result.lines()
    match = FINDING_LINE.match(line)
    assert match and match["code"] == "NZ001" and match["path"] == "broken.py"
    try:
        compile(SYNTAX_ERROR_SOURCE, "broken.py", "exec")
    except SyntaxError as err:
        assert (int(match["line"]), int(match["col"])) == (err.lineno, err.offset)
        assert err.msg in line


def test_undecodable_file_is_reported_by_path_and_the_rest_linted(lint, tmp_path, nan_code):
    write(tmp_path / "latin.py", b"x = 1\nname = '\xe9t\xe9'\n")
    write(tmp_path / "train.py", BAD_SOURCE)
    result = lint()
    assert result.code == 1
    assert "latin.py: cannot decode" in result.err
    assert [line.split(":")[0] for line in result.lines()] == ["train.py"]
    assert lint("--exit-zero").code == 0


def test_a_coding_declaration_is_honoured(lint, tmp_path):
    write(tmp_path / "latin.py", b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n")
    result = lint()
    assert (result.code, result.out, result.err) == (0, "", "")


def test_undecodable_file_alone_fails_the_run(lint, tmp_path):
    write(tmp_path / "bad.py", b"\xff\xfe\x00junk")
    result = lint("bad.py")
    assert result.code == 1
    assert result.out == ""
    assert "bad.py: cannot decode" in result.err


def test_stdin_is_linted_under_the_given_filename(tmp_path, nan_code):
    result = run_console_script(
        "lint", "-", "--stdin-filename", "src/train.py", cwd=tmp_path, stdin=BAD_SOURCE.encode()
    )
    assert result.code == 1
    assert result.out.startswith(f"src/train.py:{BAD_LINE}:")
    assert f" {nan_code} " in result.out
    clean = run_console_script("lint", "-", cwd=tmp_path, stdin=GOOD_SOURCE.encode())
    assert (clean.code, clean.out) == (0, "")


def test_stdin_without_a_filename_is_called_stdin(tmp_path):
    result = run_console_script("lint", "-", cwd=tmp_path, stdin=SYNTAX_ERROR_SOURCE.encode())
    assert result.code == 1
    assert result.out.startswith("<stdin>:1:")


def test_stdin_cannot_be_mixed_with_paths(lint, tmp_path):
    write(tmp_path / "a.py", GOOD_SOURCE)
    result = lint("-", "a.py")
    assert result.code == 2
    assert "standard input" in result.err


def test_a_missing_path_is_a_usage_error_naming_it(lint):
    result = lint("nowhere.py")
    assert result.code == 2
    assert "nowhere.py" in result.err


def test_no_command_is_a_usage_error(capsys):
    from nozero.cli import main

    assert main([]) == 2
    assert "lint" in capsys.readouterr().err


def test_unknown_select_or_ignore_code_is_an_error_not_a_no_op(lint, tmp_path):
    write(tmp_path / "a.py", GOOD_SOURCE)
    for option in ("--select", "--ignore"):
        result = lint(option, "NZ999", "a.py")
        assert result.code == 2, option
        assert "NZ999" in result.err and option in result.err


def test_ignore_and_select_change_what_is_reported(lint, tmp_path, nan_code):
    write(tmp_path / "train.py", BAD_SOURCE)
    write(tmp_path / "broken.py", SYNTAX_ERROR_SOURCE)
    assert {FINDING_LINE.match(x)["code"] for x in lint().lines()} == {"NZ001", nan_code}
    only_syntax = lint("--select", "NZ001")
    assert [FINDING_LINE.match(x)["code"] for x in only_syntax.lines()] == ["NZ001"]
    ignored = lint("--ignore", f"NZ001,{nan_code}")
    assert (ignored.code, ignored.out) == (0, "")
    by_prefix = lint("--select", nan_code[:3])
    assert nan_code in by_prefix.out and "NZ001" not in by_prefix.out


def test_noqa_suppresses_and_require_reason_demands_a_reason(lint, tmp_path, nan_code):
    bare = BAD_SOURCE.replace(
        "jnp.nan_to_num(grads)", f"jnp.nan_to_num(grads)  # noqa: {nan_code}"
    )
    reasoned = BAD_SOURCE.replace(
        "jnp.nan_to_num(grads)", f"jnp.nan_to_num(grads)  # noqa: {nan_code} fp16 loss scaling"
    )
    write(tmp_path / "bare.py", bare)
    write(tmp_path / "reasoned.py", reasoned)
    plain = lint()
    assert (plain.code, plain.out) == (0, "")
    strict = lint("--require-reason")
    assert strict.code == 1
    # The bare comment no longer suppresses, and is itself reported.
    reported = sorted((line.split(":")[0], line.split()[1]) for line in strict.lines())
    assert reported == [("bare.py", "NZ002"), ("bare.py", nan_code)]


def test_statistics_counts_findings_per_code(lint, tmp_path, nan_code):
    for name in ("a.py", "b.py"):
        write(tmp_path / name, BAD_SOURCE)
    write(tmp_path / "c.py", SYNTAX_ERROR_SOURCE)
    result = lint("--statistics")
    assert result.code == 1
    rows = [line.split() for line in result.lines()]
    assert [row[:2] for row in rows] == [["2", nan_code], ["1", "NZ001"]]


def test_many_files_through_worker_processes_match_one_process(lint, tmp_path):
    sources = [BAD_SOURCE, GOOD_SOURCE, GOOD_SOURCE, SYNTAX_ERROR_SOURCE] * 6
    for index, source in enumerate(sources):
        write(tmp_path / f"m{index:02d}.py", source)
    pooled = lint("--no-cache", "--jobs", "2")
    single = lint("--no-cache", "--jobs", "1")
    assert pooled.out == single.out
    assert len(pooled.lines()) == 12  # 6 nan_to_num files + 6 syntax errors


def test_rules_lists_every_rule_with_its_default(lint):
    result = lint(command="rules")
    assert result.code == 0
    listed = {line.split()[0]: line.split()[2] for line in result.lines()[1:]}
    for rule in ALL_RULES:
        assert listed[rule.code] == ("on" if rule.default_enabled else "off")
    assert listed["NZ001"] == "on"


def test_rule_prints_the_documentation(lint, nan_code):
    [rule] = [r for r in ALL_RULES if r.code == nan_code]
    result = lint(nan_code.lower(), command="rule")
    assert result.code == 0
    assert result.out.startswith(f"{nan_code} {rule.name}")
    assert rule.doc.strip().splitlines()[0] in result.out
    unknown = lint("NZ999", command="rule")
    assert unknown.code == 2 and "NZ999" in unknown.err


def test_console_script_help_names_the_commands(tmp_path: Path):
    result = run_console_script("--help", cwd=tmp_path)
    assert result.code == 0
    for command in ("lint", "rules", "rule"):
        assert command in result.out
