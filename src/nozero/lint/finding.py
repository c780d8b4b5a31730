"""One finding: where, which rule, what it says.

Its own module, free of libcst, because a warm run answered from the cache builds
findings without importing the engine (libcst and the rules cost half a second).
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
