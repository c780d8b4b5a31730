"""Findings as text, JSON, SARIF 2.1.0 or GitHub Actions annotations."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING
from urllib.parse import quote

from nozero import __version__

if TYPE_CHECKING:
    from nozero.lint.finding import Finding

FORMATS = ("text", "json", "sarif", "github")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


@dataclass(frozen=True)
class RuleInfo:
    """What an output format says about a rule besides the finding's own message."""

    code: str
    name: str
    message: str
    doc: str = ""
    default_enabled: bool = True


def rule_infos() -> dict[str, RuleInfo]:
    """Code -> RuleInfo for every rule, for the output formats, listings and selection.

    This imports the rules (and libcst); a lint run reads the cache's snapshot instead.
    """
    from nozero.lint.rules import ALL_RULES

    return {
        rule.code: RuleInfo(rule.code, rule.name, rule.message, rule.doc, rule.default_enabled)
        for rule in ALL_RULES
    }


def render(findings: Sequence[Finding], fmt: str, rules: Mapping[str, RuleInfo]) -> str:
    """The whole report in format ``fmt``, ending with a newline unless empty."""
    renderers: dict[str, Callable[[Sequence[Finding], Mapping[str, RuleInfo]], str]] = {
        "text": _text,
        "json": _json,
        "sarif": _sarif,
        "github": _github,
    }
    return renderers[fmt](findings, rules)


def statistics(findings: Sequence[Finding], fmt: str, rules: Mapping[str, RuleInfo]) -> str:
    """How many findings each code has, most frequent first (JSON for ``--format json``)."""
    counts = sorted(Counter(f.code for f in findings).items(), key=lambda kv: (-kv[1], kv[0]))
    rows = [
        {"code": code, "name": _info(code, rules).name, "count": count,
         "message": _info(code, rules).message}
        for code, count in counts
    ]
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    width = max((len(str(row["count"])) for row in rows), default=1)
    return "".join(
        f"{row['count']:>{width}}  {row['code']}  {row['name']}: {row['message']}\n"
        for row in rows
    )


def _info(code: str, rules: Mapping[str, RuleInfo]) -> RuleInfo:
    return rules.get(code) or RuleInfo(code, code, "")


def _text(findings: Sequence[Finding], rules: Mapping[str, RuleInfo]) -> str:
    return "".join(f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}\n" for f in findings)


def _json(findings: Sequence[Finding], rules: Mapping[str, RuleInfo]) -> str:
    rows = [
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
    return json.dumps(rows, indent=2) + "\n"


def _sarif(findings: Sequence[Finding], rules: Mapping[str, RuleInfo]) -> str:
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
    log = {
        "version": "2.1.0",
        "$schema": SARIF_SCHEMA,
        "runs": [
            {
                "tool": {
                    "driver": {"name": "nozero", "version": __version__, "rules": driver_rules}
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _uri(path: str) -> str:
    pure = PurePath(path)
    return pure.as_uri() if pure.is_absolute() else quote(pure.as_posix())


def _github(findings: Sequence[Finding], rules: Mapping[str, RuleInfo]) -> str:
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
    return "".join(lines)


def _escape(value: str, is_property: bool) -> str:
    """The workflow-command escaping GitHub documents for messages and properties."""
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if is_property:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value
