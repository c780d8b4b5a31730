"""Findings in the formats ruff's users know: concise, full, JSON, JSON Lines, JUnit XML,
GitLab code quality, GitHub Actions annotations and SARIF 2.1.0.

Files that could not be linted (undecodable, unreadable, an internal error) appear in
every machine-readable format, so that a CI job reading only the report sees them: as
JSON rows with ``"code": null``, as JUnit errors, as GitLab blocker issues, as SARIF tool
execution notifications, as GitHub ``::error`` annotations. The two text formats leave
them to stderr (the command line).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath

from nozero import __version__
from nozero.lint.catalog import RuleEntry
from nozero.lint.finding import Finding, Problem

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# The text a ``full`` report quotes: a path's source, or None when it cannot be read.
SourceOf = Callable[[str], "str | None"]
Rules = Mapping[str, RuleEntry]
Renderer = Callable[[Sequence[Finding], Rules, Sequence[Problem], SourceOf], str]
# ``full`` quotes at most this many lines of a statement that spans more.
MAX_QUOTED_LINES = 4


def render(
    findings: Sequence[Finding],
    fmt: str,
    rules: Rules,
    problems: Sequence[Problem] = (),
    source_of: SourceOf = lambda path: None,
) -> str:
    """The whole report in format ``fmt`` (a name in ``FORMATS``), ending with a newline
    unless empty. ``source_of`` gives the text the ``full`` format quotes."""
    return RENDERERS[ALIASES.get(fmt, fmt)](findings, rules, problems, source_of)


def is_text(fmt: str) -> bool:
    """Formats read by people, after which the summary line is printed."""
    return ALIASES.get(fmt, fmt) in ("concise", "full")


def statistics(findings: Sequence[Finding], fmt: str, rules: Rules) -> str:
    """How many findings each code has, most frequent first: as JSON for ``json`` and
    ``json-lines``, as text for the text formats (``STATISTICS_FORMATS``)."""
    counts = sorted(Counter(f.code for f in findings).items(), key=lambda kv: (-kv[1], kv[0]))
    rows = [
        {
            "code": code,
            "name": _info(code, rules).name,
            "count": count,
            "message": _info(code, rules).message,
        }
        for code, count in counts
    ]
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "json-lines":
        return "".join(json.dumps(row) + "\n" for row in rows)
    width = max((len(str(row["count"])) for row in rows), default=1)
    return "".join(
        f"{row['count']:>{width}}  {row['code']}  {row['name']}: {row['message']}\n" for row in rows
    )


def _info(code: str, rules: Rules) -> RuleEntry:
    return rules.get(code) or RuleEntry(code, code, "", True, "")


def _concise(findings: Sequence[Finding], *_: object) -> str:
    return "".join(f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}\n" for f in findings)


def _full(
    findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem], source_of: SourceOf
) -> str:
    """Each finding's line, then the statement's source lines with a caret under the
    column, numbered as an editor numbers them."""
    blocks = []
    for f in findings:
        head = f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}\n"
        source = source_of(f.path)
        lines = source.splitlines() if source is not None else []
        if not 1 <= f.line <= len(lines):
            blocks.append(head)
            continue
        last = min(max(f.end_line, f.line), len(lines), f.line + MAX_QUOTED_LINES - 1)
        width = len(str(last))
        quoted = [f"{n:>{width}} | {lines[n - 1]}".rstrip() for n in range(f.line, last + 1)]
        prefix = lines[f.line - 1][: f.col - 1]
        # Tabs kept, everything else blanked: the caret lands under the column in any
        # tab width.
        pad = "".join(ch if ch == "\t" else " " for ch in prefix)
        quoted.insert(1, f"{'':>{width}} | {pad}^ {f.code}")
        if last < max(f.end_line, f.line):
            quoted.append(f"{'':>{width}} | ...")
        blocks.append(head + "".join(f"{row}\n" for row in quoted))
    return "\n".join(blocks)


def _rows(findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem]) -> list[dict]:
    """One JSON object per finding, then one per file not linted (``"code": null``)."""
    rows: list[dict[str, object]] = [
        {
            "path": f.path,
            "line": f.line,
            "column": f.col,
            "end_line": f.end_line or f.line,
            "code": f.code,
            "name": _info(f.code, rules).name,
            "message": f.message,
        }
        for f in findings
    ]
    rows += [
        {
            "path": p.path,
            "line": 1,
            "column": 1,
            "end_line": 1,
            "code": None,
            "name": p.kind,
            "message": p.message,
        }
        for p in problems
    ]
    return rows


def _json(
    findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem], *_: object
) -> str:
    return json.dumps(_rows(findings, rules, problems), indent=2) + "\n"


def _json_lines(
    findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem], *_: object
) -> str:
    return "".join(json.dumps(row) + "\n" for row in _rows(findings, rules, problems))


def _sarif(
    findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem], *_: object
) -> str:
    codes = sorted({f.code for f in findings} | set(rules))
    index = {code: i for i, code in enumerate(codes)}
    driver_rules = []
    for code in codes:
        info = _info(code, rules)
        rule: dict[str, object] = {
            "id": code,
            "name": info.name,
            "shortDescription": {"text": info.message or code},
        }
        if info.doc:
            rule["fullDescription"] = {"text": info.doc}
        driver_rules.append(rule)
    results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": "error",
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(f.path)},
                        "region": {
                            "startLine": f.line,
                            "startColumn": f.col,
                            "endLine": max(f.end_line, f.line),
                        },
                    }
                }
            ],
        }
        for f in findings
    ]
    # A file nozero could not lint is a fact about the run, not a result: SARIF's
    # tool execution notifications (an internal error also marks the run unsuccessful).
    notifications = [
        {
            "level": "error",
            "message": {"text": p.message},
            "descriptor": {"id": p.kind},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(p.path)}}}],
        }
        for p in problems
    ]
    invocation = {
        "executionSuccessful": not any(p.internal for p in problems),
        "toolExecutionNotifications": notifications,
    }
    log = {
        "version": "2.1.0",
        "$schema": SARIF_SCHEMA,
        "runs": [
            {
                "tool": {
                    "driver": {"name": "nozero", "version": __version__, "rules": driver_rules}
                },
                "invocations": [invocation],
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _uri(path: str) -> str:
    from urllib.parse import quote  # SARIF only: kept off the common path

    pure = PurePath(path)
    return pure.as_uri() if pure.is_absolute() else quote(pure.as_posix())


def _github(
    findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem], *_: object
) -> str:
    lines = []
    for f in findings:
        props = {
            "file": f.path,
            "line": f.line,
            "col": f.col,
            "endLine": max(f.end_line, f.line),
            "title": f"nozero {f.code} ({_info(f.code, rules).name})",
        }
        joined = ",".join(f"{key}={_escape(str(value), True)}" for key, value in props.items())
        lines.append(f"::error {joined}::{_escape(f'{f.code} {f.message}', False)}\n")
    for p in problems:
        props = {"file": p.path, "title": f"nozero: {p.kind}"}
        joined = ",".join(f"{key}={_escape(value, True)}" for key, value in props.items())
        lines.append(f"::error {joined}::{_escape(p.message, False)}\n")
    return "".join(lines)


def _escape(value: str, is_property: bool) -> str:
    """The workflow-command escaping GitHub documents for messages and properties."""
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if is_property:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def _junit(
    findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem], *_: object
) -> str:
    """JUnit XML as CI test reports read it: one test suite per file, one failing test
    case per finding, an error per file not linted; a clean run is one passing case."""
    from xml.etree import ElementTree as ET  # junit only: kept off the common path

    by_path: dict[str, list[Finding | Problem]] = {}
    for item in [*findings, *problems]:
        by_path.setdefault(item.path, []).append(item)
    failures, errors = len(findings), len(problems)
    tests = max(1, failures + errors)
    root = ET.Element(
        "testsuites", name="nozero", tests=str(tests), failures=str(failures), errors=str(errors)
    )
    if not by_path:
        suite = ET.SubElement(root, "testsuite", name="nozero", tests="1", failures="0")
        ET.SubElement(suite, "testcase", name="No findings", classname="nozero")
    for path, items in by_path.items():
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(items)))
        suite.set("failures", str(sum(isinstance(i, Finding) for i in items)))
        suite.set("errors", str(sum(isinstance(i, Problem) for i in items)))
        for item in items:
            if isinstance(item, Finding):
                case = ET.SubElement(suite, "testcase", name=f"nozero.{item.code}", classname=path)
                case.set("line", str(item.line))
                case.set("column", str(item.col))
                failure = ET.SubElement(case, "failure", message=item.message)
                failure.text = f"{path}:{item.line}:{item.col}: {item.code} {item.message}"
            else:
                case = ET.SubElement(suite, "testcase", name=f"nozero.{item.kind}", classname=path)
                error = ET.SubElement(case, "error", message=item.message)
                error.text = f"{path}: {item.message}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _gitlab(
    findings: Sequence[Finding], rules: Rules, problems: Sequence[Problem], *_: object
) -> str:
    """GitLab's code quality report. A fingerprint is the path, the code, the message and
    the how-manieth such finding it is, not the line: a finding keeps its fingerprint when
    code above it moves, so a merge request shows it as old, not fixed-and-new."""
    seen: Counter[tuple[str, str, str]] = Counter()
    issues: list[dict[str, object]] = []
    for f in findings:
        key = (f.path, f.code, f.message)
        seen[key] += 1
        issues.append(
            {
                "type": "issue",
                "check_name": f.code,
                "description": f"{f.code} {f.message}",
                "categories": ["Bug Risk"],
                "severity": "major",
                "fingerprint": _fingerprint(*key, str(seen[key])),
                "location": {
                    "path": f.path,
                    "lines": {"begin": f.line, "end": max(f.end_line, f.line)},
                },
            }
        )
    for p in problems:
        issues.append(
            {
                "type": "issue",
                "check_name": f"nozero/{p.kind}",
                "description": p.message,
                "categories": ["Bug Risk"],
                "severity": "blocker",
                "fingerprint": _fingerprint(p.path, p.kind, p.message),
                "location": {"path": p.path, "lines": {"begin": 1, "end": 1}},
            }
        )
    return json.dumps(issues, indent=2) + "\n"


def _fingerprint(*parts: str) -> str:
    import hashlib  # only GitLab's report needs it; importing it costs every run a few ms

    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


RENDERERS: dict[str, Renderer] = {
    "concise": _concise,
    "full": _full,
    "json": _json,
    "json-lines": _json_lines,
    "junit": _junit,
    "gitlab": _gitlab,
    "github": _github,
    "sarif": _sarif,
}
FORMATS: tuple[str, ...] = tuple(RENDERERS)
# Names kept working for configurations written before ``--output-format``.
ALIASES = {"text": "concise"}
STATISTICS_FORMATS = ("concise", "full", "json", "json-lines")
