"""Decide cheaply which code libcst must see.

Every rule needs one of a few words in the code it flags (``nan_to_num``, ``isnan``,
``apply_if_finite``, a name imported as one of them, a same-file helper wrapping one...),
and words in comments or strings only ever make these checks pass, never fail. So:

1. a file without any trigger text holds no finding and is not parsed for the rules;
2. otherwise the standard library's ``ast`` splits it into units (top-level statements,
   and the statements of a class body); units whose lines hold a trigger word (or this
   file's own name for one) are narrowed to the statements, in the body of their
   innermost function, that hold a trigger node (a handler that catches any error is one
   there: NZ301 asks its unit for trigger text too); only those are handed to libcst.

Both steps over-approximate, so they never change the findings (``shortcuts=False``
hands the whole file to libcst, and the tests compare the two).
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from nozero.lint import vocab
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.lines import line_starts
from nozero.lint.noqa import has_nozero_noqa

if TYPE_CHECKING:  # the facts are imported with the engine, when a file is parsed
    from nozero.lint.facts.scopes import FileFacts, FunctionNode


def could_hold_finding(text: str) -> bool:
    """False only when no rule can flag anything in ``text`` (one file). The answer for
    the text last asked about is kept: a file is screened before it is linted, and its
    summary asks again about the same text (the same object, so no comparison)."""
    if text is _last_screened[0]:
        return _last_screened[1]
    answer = _screen(text)
    _last_screened[:] = [text, answer]
    return answer


_last_screened: list = [None, False]


def _screen(text: str) -> bool:
    return bool(
        vocab.TRIGGER_SCREEN.search(text)
        or ("!=" in text and vocab.self_comparisons(text))
        or ("except" in text and vocab.holds_nonfinite_text(text))
        or ("==" in text and vocab.compares_with_inf(text))
        or bool(vocab.implicit_tests(text, first_only=True))  # ``loss < limit``, ``g.ne(g)``
        or vocab.FLOW_SCREEN.search(text)
        or vocab.binds_flag(text)
        or any(suffix in text for suffix in vocab.SETTING_SUFFIXES)
        or bool(
            vocab.nonfinite_names(text, vocab.names_nonfinite_helper_or_exception, first_only=True)
        )
    )


class TriggerLines:
    """The lines of one file that hold trigger text, found once for the whole file so
    that each unit is a lookup rather than a search."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._starts = line_starts(source)
        self.words = self._lines(vocab.word_offsets(source, vocab.TRIGGER_WORDS))
        self.words += self._lines(vocab.self_comparisons(source))
        if "==" in source:  # ``g[g == float("inf")] = 0``: infinity named without a word
            self.words += self._lines(_masking_inf_comparisons(source))
        for suffix in vocab.SETTING_SUFFIXES:  # ``ctc_zero_infinity``: part of a word
            at = source.find(suffix)
            while at >= 0:
                self.words += self._lines([at])
                at = source.find(suffix, at + 1)
        self.words.sort()
        except_offsets = vocab.word_offsets(source, ["except"])
        self.excepts = self._lines(except_offsets)
        self.nonfinite_text = (
            self._lines(m.start() for m in vocab.NONFINITE_TEXT.finditer(source))
            if self.excepts
            else []
        )
        # handlers that catch any error (NZ301 reads what training goes on past there)
        self.broad_excepts = self._lines(
            at for at in except_offsets if _BROAD_EXCEPT.match(source, at)
        )

    def _lines(self, offsets: Iterable[int]) -> list[int]:
        return sorted({bisect_right(self._starts, offset) for offset in offsets})

    def add_words(self, words: Iterable[str]) -> None:
        """Also count this file's own names for the trigger words (aliases, helpers)."""
        found = self._lines(vocab.word_offsets(self.source, words))
        self.words = sorted(set(self.words).union(found))

    def could_hold_finding(self, first: int, last: int, except_text: bool | None = None) -> bool:
        """Do lines ``first..last`` hold trigger text? ``except_text``: whether the unit
        around them holds both ``except`` and a non-finite string (None: find out)."""
        if except_text is None:
            except_text = _any_within(self.excepts, first, last) and _any_within(
                self.nonfinite_text, first, last
            )
        return _any_within(self.words, first, last) or (
            except_text and _any_within(self.excepts, first, last)
        )


# ``except:``, ``except Exception as err:``, ``except (OSError, RuntimeError):``: a handler
# that catches any error, a finiteness check's among them.
_BROAD_EXCEPT = re.compile(
    r"except\s*(?::|[^:\n]*\b(?:" + "|".join(sorted(vocab.BROAD_EXCEPTIONS)) + r")\b)"
)


def units_with_triggers(source: str, tree: ast.Module) -> list[tuple[int, int]]:
    """First and last line of each unit (a top-level statement, or a statement of a
    class body) that holds trigger text. The shortcuts hand libcst parts of these units
    only, so a rule that reports what needs no trigger word of its own (a handler
    catching any error) asks whether its node lies in one: its findings never depend on
    the shortcuts."""
    triggers = TriggerLines(source)
    return [
        (unit.first, unit.last)
        for unit in split_units(tree, source.splitlines(keepends=True))
        if triggers.could_hold_finding(unit.first, unit.last)
    ]


# What a comparison with infinity must share its line with for a rule that parses it to
# match: a select, a masked fill, an assignment through a mask, a conditional expression.
# (Tests in ``if`` statements are the flow pass's, which reads the whole file.)
_MASKING = re.compile(r"where\(|masked_fill|\]\s*=(?!=)|\bif\b.*\belse\b")


def _masking_inf_comparisons(source: str) -> Iterable[int]:
    for match in vocab.INF_COMPARISON.finditer(source):
        start = source.rfind("\n", 0, match.start()) + 1
        end = source.find("\n", match.end())
        if _MASKING.search(source, start, len(source) if end < 0 else end):
            yield match.start()


def _any_within(sorted_lines: list[int], first: int, last: int) -> bool:
    at = bisect_left(sorted_lines, first)
    return at < len(sorted_lines) and sorted_lines[at] <= last


@dataclass
class Unit:
    """Whole lines ``first..last`` (1-based) holding one or more complete statements."""

    first: int
    last: int
    nodes: list[ast.stmt]
    nested: bool  # indented: libcst needs a block header in front of it
    enclosing: int = 0  # def line of the function the unit sits in (0: none)

    def text(self, lines: list[str]) -> str:
        return "".join(lines[self.first - 1 : self.last])

    def functions(self) -> list[FunctionNode]:
        """Every ``def`` in the unit in source order: the order libcst visits them in."""
        found = [
            node
            for top in self.nodes
            for node in ast.walk(top)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        return sorted(found, key=lambda fn: (fn.lineno, fn.col_offset))


def _decorators(node: ast.stmt) -> list[ast.expr]:
    return getattr(node, "decorator_list", [])


def _first_line(node: ast.stmt) -> int:
    decorators = _decorators(node)
    return decorators[0].lineno if decorators else node.lineno


def _starts_line(node: ast.stmt, lines: list[str]) -> bool:
    """Is ``node`` (with its decorators) the first thing on its line?"""
    decorators = _decorators(node)
    column = decorators[0].col_offset - 1 if decorators else node.col_offset
    return not lines[_first_line(node) - 1].encode()[:column].strip()


def _unit_of(node: ast.stmt, nested: bool) -> Unit:
    return Unit(_first_line(node), node.end_lineno or node.lineno, [node], nested)


def split_units(tree: ast.Module, lines: list[str]) -> list[Unit]:
    """Top-level statements, with class bodies split into their statements (so that one
    suspicious method does not send a whole class to libcst). Statements sharing a line
    (``a = 1; b = 2``) stay in one unit."""
    # (statement, inside a class body). Not its column: a top-level line may start with
    # a form feed, which ``ast`` counts as a column and the tokenizer as no indentation.
    statements: list[tuple[ast.stmt, bool]] = []

    def add(body: list[ast.stmt], nested: bool) -> None:
        for node in body:
            if (
                isinstance(node, ast.ClassDef)
                and node.body
                and all(_starts_line(child, lines) for child in node.body)
            ):
                add(node.body, True)
            else:
                statements.append((node, nested))

    add(tree.body, False)
    units: list[Unit] = []
    for node, nested in statements:
        unit = _unit_of(node, nested)
        if units and unit.first <= units[-1].last:
            units[-1].last = max(units[-1].last, unit.last)
            units[-1].nodes.append(node)
        else:
            units.append(unit)
    return units


def _is_trigger(node: ast.AST, names: frozenset[str], except_text: bool, broad: bool) -> bool:
    """Can a rule's match start at ``node``? (Over-approximates every rule's condition.)"""
    if isinstance(node, ast.Name):
        return node.id in names or node.id.endswith(vocab.SETTING_SUFFIXES)
    if isinstance(node, ast.Attribute):
        return node.attr in names or node.attr.endswith(vocab.SETTING_SUFFIXES)
    if isinstance(node, ast.arg):  # ``def __init__(self, ctc_zero_infinity=True)``
        return node.arg.endswith(vocab.SETTING_SUFFIXES)
    if isinstance(node, ast.keyword):
        return node.arg in names or (node.arg or "").endswith(vocab.SETTING_SUFFIXES)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, ast.Compare):  # ``x != x``, ``g == float("inf")``
        from nozero.lint.facts.scopes import compares_itself, is_inf

        return compares_itself(node) or any(map(is_inf, (node.left, *node.comparators)))
    if isinstance(node, ast.ExceptHandler):
        return except_text or (broad and _catches_any_error(node))
    return False


def _catches_any_error(handler: ast.ExceptHandler) -> bool:
    """``except:`` or a handler naming ``Exception``, ``RuntimeError``, ``BaseException``."""
    caught = handler.type
    if caught is None:
        return True
    parts = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(last_part(dotted_name(part) or "") in vocab.BROAD_EXCEPTIONS for part in parts)


def narrow(
    unit: Unit, lines: list[str], names: frozenset[str], triggers: TriggerLines
) -> tuple[list[Unit], set[FunctionNode]]:
    """The parts of ``unit`` libcst must see, and the functions holding a trigger.

    Rules look no further than the function a match is in (what they need from
    elsewhere they ask ``FileFacts``), and up to the statement of that function's body
    that holds the match. So each place a rule could match sends the statement of its
    innermost function's body to libcst; outside any function, the whole unit. The walk
    only enters nodes whose lines hold trigger text."""
    except_text = _any_within(triggers.excepts, unit.first, unit.last) and _any_within(
        triggers.nonfinite_text, unit.first, unit.last
    )
    broad = _any_within(triggers.broad_excepts, unit.first, unit.last)
    pieces: dict[int, Unit] = {}
    holders: set[FunctionNode] = set()
    # (node, innermost function starting its own line, statement of that function's body)
    stack: list[tuple[ast.AST, FunctionNode | None, ast.stmt | None]] = [
        (node, None, None) for node in unit.nodes
    ]
    while stack:
        node, function, statement = stack.pop()
        lineno = getattr(node, "lineno", None)
        if _decorators(node):  # ``@retry(FloatingPointError)`` sits above the ``def``
            lineno = _first_line(node)
        if lineno is not None and not triggers.could_hold_finding(
            lineno, node.end_lineno or lineno, except_text or broad
        ):
            continue
        if _is_trigger(node, names, except_text, broad):
            if function is None:
                return [unit], holders
            holders.add(function)
            if statement is not None and _starts_line(statement, lines):
                piece = _unit_of(statement, True)
                piece.enclosing = function.lineno
            else:  # nested unless it is the unit's own top-level statement
                piece = _unit_of(function, unit.nested or function not in unit.nodes)
            pieces[id(piece.nodes[0])] = piece
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _starts_line(node, lines):
            body = {id(child) for child in node.body}
            stack.extend(
                (child, node, child if id(child) in body else None)
                for child in ast.iter_child_nodes(node)
            )
        else:
            stack.extend((child, function, statement) for child in ast.iter_child_nodes(node))
    found = list(pieces.values())
    outermost = [p for p in found if not any(_within(p, other) for other in found)]
    return sorted(outermost, key=lambda p: p.first), holders


def _in_test(piece: Unit, facts: FileFacts) -> bool:
    """Is the piece inside a test function? Rules report nothing there (a test that
    calls a switch exercises it), so libcst need not see it."""
    if piece.enclosing:
        return facts.in_test(piece.enclosing)
    node = piece.nodes[0]
    is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    return is_function and len(piece.nodes) == 1 and facts.in_test(node.lineno)


def _within(inner: Unit, outer: Unit) -> bool:
    return inner is not outer and outer.first <= inner.first and inner.last <= outer.last


@lru_cache(maxsize=1)
def concerns_nozero(source: str, checks_reasons: bool) -> bool:
    """Is ``source`` nozero's to parse at all? Only with trigger text, or (when bare
    ``# noqa`` comments are reported) a ``# noqa`` naming a nozero code. The runner asks
    first (and spares itself importing the engine when not); the engine then asks again
    about the same text, which the one-entry cache answers without a second scan."""
    return could_hold_finding(source) or (checks_reasons and has_nozero_noqa(source))


def candidate_units(
    source: str, units: list[Unit], lines: list[str], facts: FileFacts
) -> list[Unit]:
    """The parts of the file libcst must see: units whose text holds a trigger word or
    one of this file's names for one (an import alias, a finiteness flag, a helper that
    sanitizes or tests), narrowed to the statements holding them. Finding the helpers and
    flags needs the functions that hold triggers, hence the fixed point."""
    names = set(vocab.TRIGGER_WORDS) | facts.scope(0).flags | vocab.sanitizer_names(source)
    names |= vocab.nonfinite_exception_names(source)  # ``except NanException:``
    names |= {name.removeprefix("self.") for name in facts.imported}
    names |= {
        local
        for local, qualified in facts.aliases.items()
        if last_part(qualified) in vocab.TRIGGER_WORDS
        or vocab.names_sanitizer(last_part(qualified))
    }
    triggers = TriggerLines(source)
    triggers.add_words(names - vocab.TRIGGER_WORDS)
    while True:
        frozen = frozenset(names)
        selected: list[Unit] = []
        holders: set[FunctionNode] = set()
        for unit in units:
            if triggers.could_hold_finding(unit.first, unit.last):
                pieces, functions = narrow(unit, lines, frozen, triggers)
                selected += [piece for piece in pieces if not _in_test(piece, facts)]
                holders |= functions
        found = {
            fn.name
            for fn in holders
            if facts.is_sanitizer_helper(fn.name) or facts.is_predicate_helper(fn.name)
        }
        for fn in holders:  # ``ok = isfinite(loss)`` ... ``where(ok, new, old)``
            if not facts.in_test(fn.lineno):  # a test's flags serve only the test
                found |= facts.scope(fn.lineno).flags
        if found <= names:
            return selected
        triggers.add_words(found - names)
        names |= found
