"""Each output format, produced by the real command line on real files."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nozero.lint.catalog import CATALOG
from nozero.lint.engine import RECURSION_LIMIT_VARIABLE, Finding
from nozero.lint.output import FORMATS, render

from .conftest import (
    BAD_LINE,
    BAD_SOURCE,
    DEEP_SOURCE,
    SYNTAX_ERROR_SOURCE,
    run_console_script,
    write,
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "src" / "train.py", BAD_SOURCE)
    write(tmp_path / "src" / "broken.py", SYNTAX_ERROR_SOURCE)
    return tmp_path


def test_json_lists_every_finding_with_its_fields(lint, project, nan_code):
    result = lint("--output-format", "json")
    assert result.code == 1
    rows = json.loads(result.out)
    assert [(row["path"], row["code"]) for row in rows] == [
        ("src/broken.py", "NZ001"),
        ("src/train.py", nan_code),
    ]
    nan_row = rows[1]
    assert nan_row["line"] == BAD_LINE and nan_row["column"] >= 1
    assert nan_row["end_line"] >= nan_row["line"]
    assert nan_row["name"] == CATALOG[nan_code].name
    assert nan_row["message"]


def test_json_of_a_clean_run_is_an_empty_list(lint, tmp_path):
    write(tmp_path / "ok.py", "x = 1\n")
    result = lint("--output-format", "json")
    assert (result.code, json.loads(result.out)) == (0, [])


def test_sarif_has_the_2_1_0_required_fields(lint, project, nan_code):
    result = lint("--output-format", "sarif")
    assert result.code == 1
    log = json.loads(result.out)
    assert log["version"] == "2.1.0"
    assert "sarif-2.1.0" in log["$schema"]
    [run] = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "nozero"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert {"NZ001", nan_code} <= set(rule_ids)
    assert len(run["results"]) == 2
    for result_ in run["results"]:
        assert result_["ruleId"] in rule_ids
        assert rule_ids[result_["ruleIndex"]] == result_["ruleId"]
        assert result_["message"]["text"]
        [location] = result_["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] in ("src/broken.py", "src/train.py")
        region = physical["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
        assert region["endLine"] >= region["startLine"]
    nan_result = next(r for r in run["results"] if r["ruleId"] == nan_code)
    assert nan_result["locations"][0]["physicalLocation"]["region"]["startLine"] == BAD_LINE


def test_sarif_uris_are_escaped_and_absolute_paths_are_file_uris():
    findings = [
        Finding("dir with space/a.py", 1, 1, "NZ001", "syntax error: x"),
        Finding("/abs/b.py", 2, 3, "NZ001", "syntax error: y"),
    ]
    log = json.loads(render(findings, "sarif", CATALOG))
    uris = [
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in log["runs"][0]["results"]
    ]
    assert uris == ["dir%20with%20space/a.py", "file:///abs/b.py"]


GITHUB_LINE = re.compile(
    r"^::error file=(?P<file>[^,]+),line=(?P<line>\d+),col=(?P<col>\d+),"
    r"endLine=(?P<end>\d+),title=(?P<title>[^:]+)::(?P<message>.+)$"
)


def test_github_format_writes_one_annotation_per_finding(lint, project, nan_code):
    result = lint("--output-format", "github")
    assert result.code == 1
    matches = [GITHUB_LINE.match(line) for line in result.lines()]
    assert all(matches), result.out
    assert [(m["file"], m["message"].split()[0]) for m in matches] == [
        ("src/broken.py", "NZ001"),
        ("src/train.py", nan_code),
    ]
    assert matches[1]["line"] == str(BAD_LINE)
    assert nan_code in matches[1]["title"]


def test_github_annotations_escape_what_would_break_the_command():
    finding = Finding("a,b:c.py", 1, 1, "NZ001", "100% wrong\nsecond line")
    [line] = render([finding], "github", CATALOG).splitlines()
    assert line.startswith("::error file=a%2Cb%3Ac.py,line=1,")
    assert line.endswith("::NZ001 100%25 wrong%0Asecond line")


def test_text_is_the_default_and_the_summary_goes_to_stderr(lint, project, nan_code):
    result = lint()
    assert result.lines()[0].startswith("src/broken.py:1:")
    assert result.lines()[1].startswith(f"src/train.py:{BAD_LINE}:")
    assert "2 finding(s)" in result.err


def test_statistics_as_json(lint, project, nan_code):
    result = lint("--statistics", "--output-format", "json")
    rows = json.loads(result.out)
    assert sorted((row["code"], row["count"]) for row in rows) == [("NZ001", 1), (nan_code, 1)]


def test_an_undecodable_file_appears_in_every_machine_readable_format(lint, project):
    """A CI job that reads only the report still learns that a file was not linted."""
    write(project / "src" / "latin.py", b"x = 1\nname = '\xe9t\xe9'\n")
    rows = json.loads(lint("--output-format", "json").out)
    [problem] = [row for row in rows if row["code"] is None]
    assert problem["path"] == "src/latin.py" and problem["name"] == "not-linted"
    assert problem["message"].startswith("cannot decode")
    assert len(rows) == 3  # the two findings are still there

    [run] = json.loads(lint("--output-format", "sarif").out)["runs"]
    [invocation] = run["invocations"]
    [note] = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and note["message"]["text"].startswith("cannot decode")
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "src/latin.py"
    assert invocation["executionSuccessful"] is True  # not linted is not a crash
    assert len(run["results"]) == 2

    github = lint("--output-format", "github")
    annotation = [line for line in github.lines() if "latin.py" in line]
    assert annotation == [annotation[0]] and annotation[0].startswith(
        "::error file=src/latin.py,title=nozero%3A not-linted::"
    )
    assert github.code == 1


def test_an_internal_error_marks_the_sarif_run_unsuccessful(lint, project, monkeypatch):
    """A deep expression under Python's default recursion limit fails inside libcst."""
    monkeypatch.setenv(RECURSION_LIMIT_VARIABLE, "1000")
    write(project / "src" / "deep.py", DEEP_SOURCE)
    result = lint("--output-format", "sarif", "--jobs", "1")
    assert result.code == 2
    [run] = json.loads(result.out)["runs"]
    [invocation] = run["invocations"]
    assert invocation["executionSuccessful"] is False
    [note] = invocation["toolExecutionNotifications"]
    assert note["descriptor"]["id"] == "internal-error"
    assert "RecursionError" in note["message"]["text"]


def test_every_format_is_offered_and_the_cli_spells_the_same_names():
    from nozero.cli import FORMATS as CLI_FORMATS

    assert FORMATS == CLI_FORMATS == (
        "concise", "full", "json", "json-lines", "junit", "gitlab", "github", "sarif"
    )  # fmt: skip


def test_full_quotes_the_source_with_a_caret_under_the_column(lint, project, nan_code):
    write(project / "src" / "tabs.py", "import torch\nif x:\n\tloss = torch.nan_to_num(loss)\n")
    result = lint("--output-format", "full")
    assert result.code == 1
    blocks = result.out.split("\n\n")
    [train] = [b for b in blocks if b.startswith("src/train.py")]
    head, quoted, caret = train.splitlines()[:3]
    col = int(head.split(":")[2])
    assert quoted == f"{BAD_LINE} | {BAD_SOURCE.splitlines()[BAD_LINE - 1]}"
    assert caret.index("^") - caret.index("|") - 2 == col - 1
    assert caret.endswith(f"^ {nan_code}")
    [tabs] = [b for b in blocks if b.startswith("src/tabs.py")]
    assert tabs.splitlines()[2] == f"  | \t       ^ {nan_code}"  # the tab kept: lines up anywhere
    assert "2 finding(s)" not in result.err and "3 finding(s)" in result.err


def test_full_quotes_a_multiline_statement_up_to_four_lines():
    source = "x = f(\n    a,\n    b,\n    c,\n    d,\n)\n"
    finding = Finding("m.py", 1, 5, "NZ101", "message", 6)
    out = render([finding], "full", CATALOG, source_of=lambda path: source)
    assert out.splitlines() == [
        "m.py:1:5: NZ101 message",
        "1 | x = f(",
        "  |     ^ NZ101",
        "2 |     a,",
        "3 |     b,",
        "4 |     c,",
        "  | ...",
    ]


def test_json_lines_is_one_json_object_per_line(lint, project, nan_code):
    rows = [json.loads(line) for line in lint("--output-format", "json-lines").lines()]
    assert rows == json.loads(lint("--output-format", "json").out)
    assert [row["code"] for row in rows] == ["NZ001", nan_code]


def test_junit_has_a_failing_case_per_finding_and_one_passing_case_when_clean(
    lint, project, tmp_path, nan_code
):
    write(project / "src" / "latin.py", b"x = 1\nname = '\xe9t\xe9'\n")
    root = ET.fromstring(lint("--output-format", "junit").out)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "1")
    suites = {suite.get("name"): suite for suite in root}
    assert set(suites) == {"src/broken.py", "src/train.py", "src/latin.py"}
    [case] = suites["src/train.py"]
    assert case.get("name") == f"nozero.{nan_code}" and case.get("line") == str(BAD_LINE)
    assert case.find("failure").get("message") == CATALOG[nan_code].message
    assert suites["src/latin.py"].find("testcase/error") is not None

    clean = tmp_path / "clean"
    write(clean / "ok.py", "x = 1\n")
    result = run_console_script("lint", "--output-format", "junit", cwd=clean, timeout=60)
    assert result.code == 0
    passed = ET.fromstring(result.out)
    assert (passed.get("tests"), passed.get("failures")) == ("1", "0")


def test_gitlab_code_quality_fields_and_fingerprints_that_survive_moved_lines(
    lint, project, nan_code
):
    issues = json.loads(lint("--output-format", "gitlab").out)
    [nan] = [i for i in issues if i["check_name"] == nan_code]
    assert nan["location"] == {"path": "src/train.py", "lines": {"begin": BAD_LINE, "end": 7}}
    assert nan["severity"] == "major" and nan["description"].startswith(nan_code)
    assert re.fullmatch(r"[0-9a-f]{32}", nan["fingerprint"])
    # Lines added above the finding move it, but it stays the same issue.
    write(project / "src" / "train.py", "# a header\n\n" + BAD_SOURCE)
    [moved] = [i for i in json.loads(lint("--output-format", "gitlab").out)
               if i["check_name"] == nan_code]  # fmt: skip
    assert moved["location"]["lines"]["begin"] == BAD_LINE + 2
    assert moved["fingerprint"] == nan["fingerprint"]
    # Two identical findings in one file are two issues.
    write(project / "src" / "train.py", BAD_SOURCE + "g2 = jnp.nan_to_num(grads)\n")
    twins = [i for i in json.loads(lint("--output-format", "gitlab").out)
             if i["check_name"] == nan_code]  # fmt: skip
    assert len({i["fingerprint"] for i in twins}) == 2


def test_the_old_format_flag_still_works_and_says_it_is_deprecated(project, nan_code):
    old = run_console_script("lint", "--format", "json", cwd=project, timeout=60)
    new = run_console_script("lint", "--output-format", "json", cwd=project, timeout=60)
    assert (old.code, old.out) == (new.code, new.out) == (1, new.out)
    assert "--format is deprecated; use --output-format" in old.err
    text = run_console_script("lint", "--format", "text", cwd=project, timeout=60)
    assert text.out == run_console_script("lint", cwd=project, timeout=60).out
    both = run_console_script(
        "lint", "--format", "json", "--output-format", "json", cwd=project, timeout=60
    )
    assert both.code == 2 and "give only one" in both.err


def test_statistics_only_in_formats_it_can_be_written_in(lint, project):
    rows = [
        json.loads(line) for line in lint("--statistics", "--output-format", "json-lines").lines()
    ]
    assert sorted(row["count"] for row in rows) == [1, 1]
    refused = lint("--statistics", "--output-format", "junit")
    assert refused.code == 2 and "--statistics prints concise, full, json" in refused.err


def test_full_quotes_standard_input_too(tmp_path, nan_code):
    result = run_console_script(
        "lint", "--output-format", "full", "-", cwd=tmp_path, stdin=BAD_SOURCE.encode(), timeout=60
    )
    assert result.code == 1
    assert result.lines()[1] == f"{BAD_LINE} | {BAD_SOURCE.splitlines()[BAD_LINE - 1]}"
    assert result.lines()[2].endswith(f"^ {nan_code}")
