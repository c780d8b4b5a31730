"""``# noqa`` suppressions, ruff style: ``# noqa`` (all codes) or ``# noqa: NZ101, NZ201``
(a prefix such as ``NZ1`` covers its codes), optionally followed by a reason
(``# noqa: NZ101 fp16 loss scaling``)."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

NOQA_PATTERN = re.compile(
    r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?(?P<reason>.*)",
    re.IGNORECASE,
)


_NOZERO_NOQA = re.compile(r"noqa\s*:[^\n]*\bNZ[0-9]", re.IGNORECASE)


def has_nozero_noqa(text: str) -> bool:
    """Might ``text`` hold a ``# noqa`` naming a nozero code (cheap, textual)? The
    case-blind search is tried only on text holding ``noqa`` in some case: ``lower()``
    maps every character the search takes for n, o, q or a to that letter, and lowering
    then a plain search costs about 0.6x the case-blind search on text without it."""
    return "noqa" in text.lower() and bool(_NOZERO_NOQA.search(text))


@dataclass(frozen=True)
class Noqa:
    line: int
    col: int  # 1-based column of the ``#``
    codes: frozenset[str] | None  # None: every code
    reason: str

    def covers(self, code: str) -> bool:
        """A code or a prefix of it (``# noqa: NZ1`` covers NZ101 and NZ102)."""
        return self.codes is None or any(code.startswith(named) for named in self.codes)


def _parse(comment: str, line: int, col: int) -> Noqa | None:
    match = NOQA_PATTERN.search(comment)
    if match is None:
        return None
    codes = match.group("codes")
    return Noqa(
        line,
        col + match.start() + 1,
        frozenset(c.upper() for c in re.split(r"[\s,]+", codes)) if codes else None,
        match.group("reason").strip(" \t,:"),
    )


def noqa_comments(source: str) -> dict[int, Noqa]:
    """The ``# noqa`` comment of each line that has one. Comments are found with the
    tokenizer, so ``"# noqa"`` inside a string never counts."""
    found: dict[int, Noqa] = {}
    if "noqa" not in source.lower():
        return found
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                noqa = _parse(token.string, token.start[0], token.start[1])
                if noqa is not None:
                    found[token.start[0]] = noqa
    except (tokenize.TokenError, SyntaxError):
        pass  # only files that parse reach here; keep what was read
    return found
