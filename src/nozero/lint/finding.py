"""What a lint run reports: findings, and files it could not lint.

Their own module, free of libcst, because a run that never needs the engine (every file
answered from the cache or free of trigger text) builds them without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    col: int  # 1-based, like ruff's output
    code: str
    message: str
    end_line: int = 0


@dataclass(frozen=True)
class Problem:
    """A file that could not be linted: undecodable, unreadable, or an internal error."""

    path: str
    message: str  # one line
    internal: bool = False
    detail: str = ""  # for an internal error, the traceback to report

    @property
    def kind(self) -> str:
        return "internal-error" if self.internal else "not-linted"
