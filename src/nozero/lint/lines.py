"""Lines as Python's tokenizer counts them (``\\n``, ``\\r\\n`` or a lone ``\\r``): the
lines that ``ast`` and libcst positions refer to."""

from __future__ import annotations

import io
from functools import lru_cache
from itertools import accumulate


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, each with its end."""
    return io.StringIO(text, newline="").readlines()


@lru_cache(maxsize=4)
def line_starts(text: str) -> list[int]:
    """Offsets where each line starts (computed once per text: many questions ask)."""
    return [0, *accumulate(len(line) for line in split_lines(text))]
