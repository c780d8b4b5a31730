"""One file's whole check: the engine's findings, then NZ003 on its ``# noqa`` comments.

NZ003 asks a question about the suppressions rather than the code (does a comment name a
code that exists, and does it suppress anything?), so it runs after the engine, on what
the engine found before and after the comments were applied, in one pass; the runner and
the rule examples' tests both check files through here.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from typing import TYPE_CHECKING

from nozero.lint.catalog import ALL_CODES, DEFAULT_CODES
from nozero.lint.files import is_test_module
from nozero.lint.finding import Finding
from nozero.lint.noqa import Noqa, has_nozero_noqa, noqa_comments

if TYPE_CHECKING:
    from nozero.lint.project import View

UNUSED_NOQA = "NZ003"


def check_source(
    source: str,
    path: str = "<stdin>",
    *,
    select: Collection[str] | None = None,
    require_reason: bool = False,
    shortcuts: bool = True,
    view: View | None = None,
) -> list[Finding]:
    """Findings for ``source`` with suppressions applied, and NZ003 when enabled;
    ``view``: what the file sees of its project (``nozero.lint.project``)."""
    from nozero.lint.engine import lint_source  # libcst: imported only to lint

    enabled = DEFAULT_CODES if select is None else frozenset(select)
    options = {"require_reason": require_reason, "shortcuts": shortcuts, "view": view}
    comments = []
    if UNUSED_NOQA in enabled and has_nozero_noqa(source):
        comments = [c for c in noqa_comments(source).values() if _nozero_codes(c)]
    if not comments:
        return lint_source(source, path, select=enabled, **options)
    # The rules the comments name run too, enabled or not: a comment for a rule left off
    # is stale all the same when that rule has nothing to say there. Their findings
    # before suppression tell what each comment could suppress; only the enabled codes
    # are reported.
    named = {
        k for c in comments for code in _nozero_codes(c) for k in ALL_CODES if k.startswith(code)
    }
    before_noqa: list[Finding] = []
    findings = lint_source(
        source,
        path,
        select=enabled | (named - {UNUSED_NOQA, "NZ002"}),
        unsuppressed=before_noqa,
        **options,
    )
    findings = [f for f in findings if f.code in enabled]
    checked = not is_test_module(path) and not any(f.code == "NZ001" for f in findings)
    raw = before_noqa if checked else None
    extra = [
        Finding(path, c.line, c.col, UNUSED_NOQA, message, c.line)
        for c in comments
        if not c.covers(UNUSED_NOQA)  # a comment that names NZ003 is kept on purpose
        for message in _complaints(c, raw, source)
    ]
    return sorted({*findings, *extra})


def _nozero_codes(comment: Noqa) -> list[str]:
    return sorted(code for code in comment.codes or () if code.startswith("NZ"))


def _complaints(comment: Noqa, raw: list[Finding] | None, source: str) -> list[str]:
    """NZ003's messages for one comment: unknown codes, then codes that suppress nothing
    (only where the rules ran: not in test modules)."""
    unknown = [c for c in _nozero_codes(comment) if not any(k.startswith(c) for k in ALL_CODES)]
    messages = [f"noqa names an unknown code: {code} (see `nozero rules`)" for code in unknown]
    if raw is None:
        return messages
    unused = []
    for code in _nozero_codes(comment):
        covered = {k for k in ALL_CODES if k.startswith(code)} - {UNUSED_NOQA, "NZ002"}
        if code in unknown or not covered:
            continue
        if not any(f.code in covered and comment.line in _honoured(f, source) for f in raw):
            unused.append(code)
    if unused:
        messages.append(f"unused noqa: no {' or '.join(unused)} finding on this line")
    return messages


def _honoured(finding: Finding, source: str) -> set[int]:
    """The lines where a ``# noqa`` suppresses ``finding``: its own line, and the first
    and last lines of the statement holding it."""
    return {finding.line, finding.end_line or finding.line} | _statement_firsts(source).get(
        (finding.line, finding.end_line), set()
    )


_FIRSTS: dict[str, dict[tuple[int, int], set[int]]] = {}


def _statement_firsts(source: str) -> dict[tuple[int, int], set[int]]:
    """For each (line, statement's last line) pair, the first lines of the statements
    spanning it (one entry per file: asked once per finding)."""
    if source not in _FIRSTS:
        _FIRSTS.clear()
        spans: dict[tuple[int, int], set[int]] = {}
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.stmt) and node.end_lineno is not None:
                for line in range(node.lineno, node.end_lineno + 1):
                    spans.setdefault((line, node.end_lineno), set()).add(node.lineno)
        _FIRSTS[source] = spans
    return _FIRSTS[source]
