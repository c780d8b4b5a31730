"""``nozero lint --add-noqa``: a ``# noqa`` comment on every flagged line, so a team can
adopt nozero on an existing code base and fix the sites one by one.

Each file changes only by the comments: the text is decoded and re-encoded the way Python
reads it (BOM and coding cookie kept), line endings are left as they are, a comment that
already holds ``# noqa: CODES`` gets the new codes merged into it, and the file is
replaced atomically, with its permissions, and only if it still parses. A finding on a
multi-line statement gets its comment on the first of its own line and the statement's
last line that can hold one (not a line continued with a backslash, not inside a string):
the lines where a ``# noqa`` is honoured.
"""

from __future__ import annotations

import ast
import io
import shutil
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nozero._atomic import atomic_output
from nozero.lint.finding import Finding
from nozero.lint.lines import split_lines
from nozero.lint.noqa import NOQA_PATTERN, noqa_comments

# Findings about the file or its comments, which a further comment cannot fix: a syntax
# error, a comment without a reason, a comment naming an unknown or unused code.
NOT_SUPPRESSIBLE = frozenset({"NZ001", "NZ002", "NZ003"})
NO_REASON = "NZ002"


@dataclass
class Outcome:
    """What ``add_noqa`` did: comments added, files changed, findings left for a person
    and files not rewritten (with why)."""

    added: int = 0
    changed: list[str] = field(default_factory=list)
    left: list[Finding] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def add_noqa(findings: Sequence[Finding], reason: str = "") -> Outcome:
    """Add ``# noqa: CODE[ reason]`` for each finding to the file it is in."""
    outcome = Outcome()
    by_path: dict[str, list[Finding]] = {}
    for finding in findings:
        # A comment without a reason (NZ002) is fixed by giving it the reason.
        fixable = finding.code == NO_REASON and bool(reason)
        if finding.code in NOT_SUPPRESSIBLE and not fixable:
            outcome.left.append(finding)
        else:
            by_path.setdefault(finding.path, []).append(finding)
    for path, group in by_path.items():
        try:
            added, left = _rewrite(Path(path), group, reason)
        except _NotRewritten as err:
            outcome.failed.append((path, f"no # noqa added: {err}"))
            continue
        outcome.left.extend(left)
        if added:
            outcome.added += added
            outcome.changed.append(path)
    return outcome


class _NotRewritten(Exception):
    """Why a file was left as it was."""


def _rewrite(path: Path, findings: list[Finding], reason: str) -> tuple[int, list[Finding]]:
    """Rewrite one file; the number of comments added or extended, and the findings no
    comment could be placed for."""
    try:
        data = path.read_bytes()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as err:
        raise _NotRewritten(f"cannot read it ({err})") from err
    new_text, placed, left = annotate(text, findings, reason)
    if not placed:
        return 0, left
    try:
        ast.parse(new_text)
        new_data = new_text.encode(encoding)
    except (SyntaxError, ValueError, UnicodeEncodeError) as err:
        raise _NotRewritten(f"the commented file would not be valid ({err})") from err
    target = path.resolve()  # a symbolic link keeps pointing at the rewritten file
    with atomic_output(target) as tmp:
        tmp.write_bytes(new_data)
        shutil.copymode(target, tmp)
    return placed, left


def annotate(text: str, findings: Sequence[Finding], reason: str = "") -> tuple[str, int, list]:
    """``text`` with the comments for ``findings`` added; how many lines got one, and the
    findings left without one (their lines cannot hold a comment)."""
    lines = split_lines(text)
    ends, comments = _line_ends_and_comments(text)
    wanted: dict[int, set[str]] = {}
    left = []
    for finding in findings:
        line = next((n for n in (finding.line, finding.end_line) if n in ends), None)
        if line is None:
            left.append(finding)
        else:
            wanted.setdefault(line, set()).add(finding.code)
    placed = 0
    existing = noqa_comments(text)
    for line, codes in sorted(wanted.items()):
        noqa = existing.get(line)
        missing = sorted(
            c for c in codes if c != NO_REASON and (noqa is None or not noqa.covers(c))
        )
        needs_reason = bool(reason) and noqa is not None and not noqa.reason
        if noqa is not None and noqa.codes is None:
            # A bare noqa comment already covers every code; narrowing it would change what
            # it suppresses, so the finding (a bare comment under --require-reason) stays.
            left.extend(f for f in findings if line in (f.line, f.end_line) and not missing)
            continue
        if not missing and not needs_reason:
            continue
        lines[line - 1] = _with_codes(lines[line - 1], comments.get(line), missing, reason)
        placed += 1
    return "".join(lines), placed, left


def _with_codes(line: str, comment_col: int | None, codes: list[str], reason: str) -> str:
    """``line`` with ``codes`` added: merged into its ``# noqa: ...`` comment, or as a
    ``# noqa`` of its own after the code (or after another comment)."""
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    match = NOQA_PATTERN.search(body, comment_col) if comment_col is not None else None
    if match is None or match.group("codes") is None:
        trailing = len(body) - len(body.rstrip(" \t"))
        pad = " " * max(0, 2 - trailing) if body.strip() else ""
        suffix = f" {reason}" if reason else ""
        return f"{body}{pad}# noqa: {', '.join(codes)}{suffix}{ending}"
    first_code_end = match.start("codes") + len(match.group("codes").replace(",", " ").split()[0])
    after_codes = match.end("codes")
    reason_text = match.group("reason").strip(" \t,:")
    extra_reason = f" {reason}" if reason and not reason_text else ""
    merged = body[:after_codes] + extra_reason + body[after_codes:]
    if codes:
        merged = merged[:first_code_end] + ", " + ", ".join(codes) + merged[first_code_end:]
    return merged + ending


def _line_ends_and_comments(text: str) -> tuple[set[int], dict[int, int]]:
    """The lines whose end the tokenizer reaches outside a string and not continued by a
    backslash (where a comment may go), and the column of each line's comment."""
    ends: set[int] = set()
    comments: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL):
                ends.add(token.start[0])
            elif token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.start[1]
    except (tokenize.TokenError, SyntaxError):
        return set(), {}  # the file does not tokenize: nothing is placed in it
    return ends, comments
