"""Decide cheaply which code libcst must see.

Every rule needs one of a few words in the code it flags (``nan_to_num``, ``isnan``,
``apply_if_finite``, a name imported as one of them, a same-file helper wrapping one...),
and words in comments or strings only ever make these checks pass, never fail. So:

1. a file without any trigger text holds no finding and is not parsed for the rules;
2. otherwise the standard library's ``ast`` splits it into units (top-level statements,
   and the statements of a class body), and only units whose text holds a trigger word
   are handed to libcst.

Both steps over-approximate, so they never change the findings (the engine checks this
with ``shortcuts=False``, which hands every unit to libcst).
"""

from __future__ import annotations

import ast
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass

from nozero.lint import vocab


def trigger_pattern(extra_names: Iterable[str] = ()) -> re.Pattern[str]:
    """The trigger words plus this file's own names for them (aliases, helpers, flags)."""
    words = "|".join(re.escape(w) for w in sorted(vocab.TRIGGER_WORDS | set(extra_names)))
    return re.compile(rf"\b(?:{words})\b")


_BASE_PATTERN = trigger_pattern()


def could_hold_finding(text: str, pattern: re.Pattern[str] = _BASE_PATTERN) -> bool:
    """False only when no rule can flag anything in ``text``."""
    return bool(
        pattern.search(text)
        or vocab.SELF_NOT_EQUAL.search(text)
        or ("except" in text and vocab.NONFINITE_TEXT.search(text))
    )


def split_lines(source: str) -> list[str]:
    """Lines as the Python tokenizer counts them (``\\n``, ``\\r\\n`` or ``\\r``), with ends."""
    return io.StringIO(source, newline="").readlines()


@dataclass
class Unit:
    """Whole lines ``first..last`` (1-based) holding one or more complete statements."""

    first: int
    last: int
    nodes: list[ast.stmt]
    nested: bool  # indented: inside a class body

    def text(self, lines: list[str]) -> str:
        return "".join(lines[self.first - 1 : self.last])


def _starts_line(node: ast.stmt, lines: list[str]) -> bool:
    first = _first_line(node)
    column = node.decorator_list[0].col_offset - 1 if _decorators(node) else node.col_offset
    return not lines[first - 1].encode()[:column].strip()


def _decorators(node: ast.stmt) -> list[ast.expr]:
    return getattr(node, "decorator_list", [])


def _first_line(node: ast.stmt) -> int:
    decorators = _decorators(node)
    return decorators[0].lineno if decorators else node.lineno


def split_units(tree: ast.Module, lines: list[str]) -> list[Unit]:
    """Top-level statements, with class bodies split into their statements (so that one
    suspicious method does not send a whole class to libcst). Statements sharing a line
    (``a = 1; b = 2``) stay in one unit."""
    pieces: list[tuple[ast.stmt, bool]] = []

    def add(statements: list[ast.stmt], nested: bool) -> None:
        for node in statements:
            if (
                isinstance(node, ast.ClassDef)
                and node.body
                and all(_starts_line(child, lines) for child in node.body)
            ):
                add(node.body, True)
            else:
                pieces.append((node, nested))

    add(tree.body, False)
    units: list[Unit] = []
    for node, nested in pieces:
        first, last = _first_line(node), node.end_lineno or node.lineno
        if units and first <= units[-1].last:
            units[-1].last = max(units[-1].last, last)
            units[-1].nodes.append(node)
        else:
            units.append(Unit(first, last, [node], nested))
    return units
