"""Lint one source text: pre-filters, then libcst on the code that can hold a finding.

PROVISIONAL STUB: the rules helper replaces this body; the signature below is the
interface the command-line tool codes against.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    col: int  # 1-based, like ruff's output
    code: str
    message: str
    end_line: int = 0


def lint_source(
    source: str,
    path: str = "<stdin>",
    *,
    select: Collection[str] | None = None,
    require_reason: bool = False,
    shortcuts: bool = True,
) -> list[Finding]:
    """Findings for ``source``, sorted, with ``# noqa`` suppressions applied.

    ``select`` is the set of enabled codes (None = the rules enabled by default);
    ``shortcuts=False`` skips the pre-filters, which must never change the findings.
    """
    try:
        compile(source, path, "exec", dont_inherit=True, flags=0x400)  # ast.PyCF_ONLY_AST
    except SyntaxError as err:
        return [Finding(path, err.lineno or 1, (err.offset or 1), "NZ001", f"syntax error: {err.msg}")]
    return []
