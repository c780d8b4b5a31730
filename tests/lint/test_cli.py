"""``nozero lint``, ``nozero rules`` and ``nozero rule`` through the real command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from nozero.lint.engine import RECURSION_LIMIT_VARIABLE
from nozero.lint.rules import ALL_RULES, get_rule

from .conftest import (
    BAD_LINE,
    BAD_SOURCE,
    DEEP_SOURCE,
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


def test_clean_code_exits_zero_with_a_summary_line_on_stderr(tmp_path):
    write(tmp_path / "train.py", GOOD_SOURCE)
    write(tmp_path / "util.py", "def add(a, b):\n    return a + b\n")
    result = run_console_script("lint", cwd=tmp_path)
    assert (result.code, result.out) == (0, "")
    assert result.err == "nozero: All checks passed! (2 files checked)\n"
    quiet = run_console_script("lint", "--quiet", cwd=tmp_path)
    assert (quiet.code, quiet.out, quiet.err) == (0, "", "")


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
    write(tmp_path / "latin.py", b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9' # isnan\n")
    result = lint()
    assert (result.code, result.out) == (0, "")
    assert "All checks passed!" in result.err


def test_a_file_without_trigger_text_is_not_parsed_so_never_nz001(lint, tmp_path):
    write(tmp_path / "broken_but_not_ours.py", "def broken(:\n    pass\n")
    result = lint("--select", "ALL")
    assert (result.code, result.out) == (0, "")
    assert "All checks passed! (1 file checked)" in result.err


NEWER_SYNTAX = {
    "pep695_alias.py": "import jax.numpy as jnp\n\ntype Grads = dict[str, jnp.ndarray]\n",
    "pep695_generic.py": (
        "import jax.numpy as jnp\n\n\n"
        "def all_finite[T](tree: T) -> bool:\n    return bool(jnp.isfinite(tree).all())\n\n\n"
        "class Box[T]:\n    value: T\n"
    ),
    "pep701_fstring.py": (
        "import math\n\nloss = 1.0\n"
        "print(f\"{'finite' if math.isfinite(loss) else 'not'}: {f'{loss:{'.3f'}}'}\")\n"
        "print(f\"{'\\n'.join(['a', 'b'])}\")\n"
    ),
}


def test_valid_newer_python_syntax_is_never_a_syntax_error(lint, tmp_path):
    """PEP 695 and PEP 701 code parses with libcst's grammar even where the running
    Python's ``ast`` rejects it (3.11); a real syntax error next to it is still found."""
    for name, source in NEWER_SYNTAX.items():
        write(tmp_path / name, source)
    write(tmp_path / "broken.py", SYNTAX_ERROR_SOURCE)
    result = lint("--select", "ALL", "--no-cache")
    assert [FINDING_LINE.match(line)["path"] for line in result.lines()] == ["broken.py"]


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
    bare = BAD_SOURCE.replace("jnp.nan_to_num(grads)", f"jnp.nan_to_num(grads)  # noqa: {nan_code}")
    reasoned = BAD_SOURCE.replace(
        "jnp.nan_to_num(grads)", f"jnp.nan_to_num(grads)  # noqa: {nan_code} fp16 loss scaling"
    )
    by_prefix = BAD_SOURCE.replace(
        "jnp.nan_to_num(grads)", f"jnp.nan_to_num(grads)  # noqa: {nan_code[:3]} fp16 scaling"
    )
    other_family = BAD_SOURCE.replace("jnp.nan_to_num(grads)", "jnp.nan_to_num(grads)  # noqa: NZ2")
    write(tmp_path / "bare.py", bare)
    write(tmp_path / "reasoned.py", reasoned)
    write(tmp_path / "by_prefix.py", by_prefix)
    write(tmp_path / "other_family.py", other_family)
    plain = lint()
    # The comment of another family suppresses nothing, and says so (NZ003).
    reported = [(line.split(":")[0], line.split()[1]) for line in plain.lines()]
    assert reported == [("other_family.py", nan_code), ("other_family.py", "NZ003")]
    (tmp_path / "other_family.py").unlink()
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


def test_an_internal_error_names_the_file_the_rest_is_linted_and_the_run_exits_2(
    tmp_path, nan_code
):
    """A deep expression with the engine's recursion limit lowered to Python's default
    (``NOZERO_LINT_RECURSION_LIMIT``): libcst's position metadata really fails on it."""
    write(tmp_path / "a_train.py", BAD_SOURCE)
    write(tmp_path / "b_deep.py", DEEP_SOURCE)
    write(tmp_path / "c_train.py", BAD_SOURCE)
    result = run_console_script(
        "lint", "--no-cache", "--jobs", "1", cwd=tmp_path, env={RECURSION_LIMIT_VARIABLE: "1000"}
    )
    assert result.code == 2, result.err
    assert [line.split(":")[0] for line in result.lines()] == ["a_train.py", "c_train.py"]
    assert "nozero: b_deep.py: internal error (RecursionError" in result.err
    assert "Traceback" in result.err and "1 file(s) not linted" in result.err


def test_select_all_turns_on_the_rules_that_are_off_by_default(lint, tmp_path):
    from nozero.lint.catalog import CATALOG

    opt_in = sorted(code for code, entry in CATALOG.items() if not entry.default)
    assert opt_in, "the catalogue has rules that are off by default"
    examples = {code: get_rule(code).INVALID[0] for code in opt_in}
    for code, source in examples.items():
        write(tmp_path / f"{code.lower()}.py", source)
    default_run = {FINDING_LINE.match(x)["code"] for x in lint("--no-cache").lines()}
    everything = {
        FINDING_LINE.match(x)["code"] for x in lint("--no-cache", "--select", "ALL").lines()
    }
    assert not default_run & set(opt_in)
    assert set(opt_in) <= everything


IMPORT_PROBE = (
    "import sys\nfrom nozero.cli import main\ncode = main()\n"
    "print('libcst' in sys.modules, file=sys.stderr)\nraise SystemExit(code)\n"
)


def test_a_pre_commit_run_on_a_file_without_trigger_text_never_imports_libcst(tmp_path):
    """One changed file, cache on, in a git repository: what the hook does on most commits.
    Rule metadata comes from the libcst-free catalogue and the file never reaches the
    engine, so libcst is not imported; a file with trigger text does import it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    write(tmp_path / "pyproject.toml", "[tool.nozero]\nignore = []\n")
    write(tmp_path / "util.py", "def add(a, b):\n    return a + b\n")
    write(tmp_path / "train.py", BAD_SOURCE)

    def imports_libcst(*args: str) -> tuple[int, bool]:
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE, "lint", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.returncode, done.stderr.splitlines()[-1] == "True"

    for _ in range(2):  # cold and warm cache
        assert imports_libcst("util.py") == (0, False)
        assert imports_libcst("--no-cache", "util.py") == (0, False)
        write(tmp_path / "util.py", (tmp_path / "util.py").read_text() + "X = 1\n")
    assert imports_libcst("--no-cache", "train.py") == (1, True)
    probe = IMPORT_PROBE.replace("main()", "main(['rules'])")
    listed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert (listed.returncode, listed.stderr.splitlines()[-1]) == (0, "False")


def test_rule_by_name_prints_the_same_page_as_by_code(tmp_path):
    by_code = run_console_script("rule", "NZ101", cwd=tmp_path, timeout=60)
    by_name = run_console_script("rule", "nan-to-num-on-signal", cwd=tmp_path, timeout=60)
    assert by_code.code == by_name.code == 0
    assert by_name.out == by_code.out and by_code.out.startswith("NZ101 nan-to-num-on-signal")
    typo = run_console_script("rule", "nan-to-num-on-signl", cwd=tmp_path, timeout=60)
    assert (typo.code, typo.out) == (2, "")
    assert "did you mean nan-to-num-on-signal (NZ101)?" in typo.err


def test_lint_help_names_every_flag_and_format_with_examples(tmp_path):
    result = run_console_script("lint", "--help", cwd=tmp_path, timeout=60)
    assert result.code == 0
    for flag in ("--output-format", "--add-noqa", "--exit-zero", "--select", "--statistics"):
        assert flag in result.out
    for fmt in ("concise", "full", "json-lines", "junit", "gitlab", "github", "sarif"):
        assert fmt in result.out
    assert "--format" not in result.out.replace("--output-format", "")  # the old name hides
    assert "examples:" in result.out and "Exit status: 0 clean, 1 findings" in result.out
    assert max(len(line) for line in result.out.splitlines()) <= 100


def test_exit_zero_through_the_installed_command_but_never_for_an_internal_error(
    tmp_path, nan_code
):
    write(tmp_path / "train.py", BAD_SOURCE)
    result = run_console_script("lint", "--exit-zero", cwd=tmp_path, timeout=120)
    assert result.code == 0 and f" {nan_code} " in result.out
    write(tmp_path / "deep.py", DEEP_SOURCE)
    crashed = run_console_script(
        "lint",
        "--exit-zero",
        "--no-cache",
        "--jobs",
        "1",
        cwd=tmp_path,
        timeout=120,
        env={RECURSION_LIMIT_VARIABLE: "1000"},
    )
    assert crashed.code == 2 and "deep.py: internal error" in crashed.err
    assert f" {nan_code} " in crashed.out  # the other file's finding is still reported
