"""Screens over raw source text: non-finite string literals, comparisons with ``inf``,
whole-word searches, self-comparisons and flag bindings, and the word screens the
pre-filter runs before any parse. Part of ``nozero.lint.vocab``, which re-exports every
name here; plain text scans so the pre-filter stays cheap."""

from __future__ import annotations

import re
from collections.abc import Iterable

from nozero.lint.vocab_calls import (
    _ASSIGNED,
    FLAG_TEXT,
    FLOW_CORES,
    SCREEN_FLOW_WORDS,
    TRIGGER_WORDS,
)

# A string literal that starts with a word for non-finite values (``"nan" in str(err)``),
# read in the raw source text (quote included).
NONFINITE_TEXT = re.compile(r"""(?i)["'](?:nan|inf|infinity|non-?finite)\b""")
_NONFINITE_TEXT_STARTS = tuple(q + w for q in "\"'" for w in ("nan", "inf", "non"))


def holds_nonfinite_text(text: str) -> bool:
    """``NONFINITE_TEXT.search(text)``, tried only where a quote opens one of its words
    (found in one lowercase copy: several times fewer steps than the pattern's scan)."""
    if not text.isascii():  # lowercasing keeps the offsets only in ASCII
        return bool(NONFINITE_TEXT.search(text))
    lowered = text.lower()
    for start in _NONFINITE_TEXT_STARTS:
        at = lowered.find(start)
        while at >= 0:
            if NONFINITE_TEXT.match(text, at):
                return True
            at = lowered.find(start, at + 1)
    return False


# An equality test with infinity (``x == float("inf")``, ``np.inf == x``), in raw text.
INF_COMPARISON = re.compile(
    r"""==\s*[-+]?\s*(?:float\(\s*["'][-+]?inf|(?:\w+\.)*[Ii]nf\b)|\b[Ii]nf\s*=="""
)


def compares_with_inf(text: str) -> bool:
    """Does a line of ``text`` compare with infinity (``x == float("inf")``)? Only lines
    holding both ``inf`` and ``==`` are matched against the pattern."""
    for word in ("inf", "Inf"):
        at = text.find(word)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            line = text[start:end]
            if "==" in line and INF_COMPARISON.search(line):
                return True
            at = text.find(word, end)
    return False


def is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def word_offsets(text: str, words: Iterable[str]) -> list[int]:
    """Where each of ``words`` occurs in ``text`` as a whole word.

    ``str.find`` per word is several times faster than one regular expression with word
    boundaries on large files, and this runs on every file that is linted."""
    found: list[int] = []
    for word in words:
        start = text.find(word)
        while start >= 0:
            end = start + len(word)
            if (start == 0 or not is_word_char(text[start - 1])) and (
                end == len(text) or not is_word_char(text[end])
            ):
                found.append(start)
            start = text.find(word, start + 1)
    return found


def has_word(text: str, word: str) -> bool:
    """Does ``word`` occur in ``text`` as a whole word?"""
    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        if (start == 0 or not is_word_char(text[start - 1])) and (
            end == len(text) or not is_word_char(text[end])
        ):
            return True
        start = text.find(word, end)
    return False


class WordScreen:
    """Does a text hold any of some words, as a whole word? Words sharing a core
    (``isnan``, ``nan_to_num``: ``nan``) are searched only in a text holding the core, so
    that a text without any costs one substring search per core, not one per word."""

    def __init__(self, words: Iterable[str], cores: Iterable[str]) -> None:
        cores = tuple(cores)
        groups: dict[str, list[str]] = {}
        for word in sorted(words):
            core = next((c for c in cores if c in word), word)
            groups.setdefault(core, []).append(word)
        self.groups = tuple((core, tuple(members)) for core, members in groups.items())

    def search(self, text: str) -> bool:
        return any(
            core in text and any(has_word(text, word) for word in members)
            for core, members in self.groups
        )


def self_comparisons(text: str) -> list[int]:
    """Offsets of each ``!=`` that compares a dotted name, or a call of one without
    arguments, with itself as text (``g != g``, ``p.grad!=p.grad``,
    ``loss.item() != loss.item()``), the NaN self-test. Rules accept a self-comparison
    only when this finds it in the comparison's own text, so a file where it finds none
    holds none."""
    found: list[int] = []
    at = text.find("!=")
    while at >= 0:
        left_end = at
        while left_end > 0 and text[left_end - 1].isspace():
            left_end -= 1
        called = text.endswith("()", 0, left_end)
        name_end = left_end - 2 if called else left_end
        left_start = name_end
        while left_start > 0 and _in_dotted_name(text[left_start - 1]):
            left_start -= 1
        right = at + 2
        while right < len(text) and text[right].isspace():
            right += 1
        name = text[left_start:name_end] + ("()" if called and left_start < name_end else "")
        after = right + len(name)
        if (
            name
            and (name[0].isalpha() or name[0] == "_")
            and text.startswith(name, right)
            and (after == len(text) or not _in_dotted_name(text[after]))
        ):
            found.append(at)
        at = text.find("!=", at + 2)
    return found


def _in_dotted_name(char: str) -> bool:
    return is_word_char(char) or char == "."


def binds_flag(text: str) -> bool:
    """``FLAG_TEXT.search(text)``, found from the flag words' occurrences rather than by
    trying the pattern at every position (several times faster on large files)."""
    for word in ("overflow", "finite"):
        at = text.find(word)
        while at >= 0:
            end = at + len(word)
            if end == len(text) or not is_word_char(text[end]):
                if word == "overflow" and at and text[at - 1] == ".":
                    return True
                if (at == 0 or not is_word_char(text[at - 1])) and _ASSIGNED.match(text, end):
                    return True
            at = text.find(word, end)
    at = text.find("OverflowError")
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        if FLAG_TEXT.search(text, line_start, len(text) if line_end < 0 else line_end):
            return True
        at = text.find("OverflowError", at + 1)
    return False


TRIGGER_SCREEN = WordScreen(TRIGGER_WORDS, ("nan", "inf", "inite"))
FLOW_SCREEN = WordScreen(SCREEN_FLOW_WORDS, FLOW_CORES)
