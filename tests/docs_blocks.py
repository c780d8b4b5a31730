"""The code blocks of the docs pages, for the tests that run them as printed.

A page's code is only worth showing if it runs, so the tests read the blocks from the
pages themselves rather than keeping a copy. A test that runs the python blocks of a page
under ``docs/plugin/recipes/`` declares it at module level, as a dict literal::

    RUNS_DOCS_BLOCKS = {"plugin/recipes/equinox.md": 2}

(page, relative to ``docs/``, -> how many of its python blocks the module runs), and
asserts that count against ``python_blocks``. ``tests/test_docs.py`` reads these
declarations without importing the modules and checks that every python block of every
recipe page is run by some test.
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"

# A fenced block opened by ``` and its language at the start of a line (indented blocks in
# lists too), closed by the first ``` at the same indentation.
_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)


def page_path(page: str | Path) -> Path:
    """A page given relative to ``docs/`` (``"guards/jax.md"``) or as a path."""
    path = Path(page)
    return path if path.is_absolute() else DOCS / path


def code_blocks(page: str | Path, language: str, first_line_prefix: str | None = None) -> list[str]:
    """The page's fenced blocks of ``language`` (```yaml), in order, dedented to the fence's
    indentation; with ``first_line_prefix``, only those whose first line starts with it.
    A page that does not exist raises ``FileNotFoundError``.
    """
    text = page_path(page).read_text(encoding="utf-8")
    blocks = []
    for match in _BLOCK.finditer(text):
        if match.group("lang") != language:
            continue
        indent = match.group("indent")
        lines = match.group("body").splitlines()
        body = "\n".join(line.removeprefix(indent) for line in lines) + "\n"
        if first_line_prefix is None or body.startswith(first_line_prefix):
            blocks.append(body)
    return blocks


def python_blocks(page: str | Path, first_line_prefix: str | None = None) -> list[str]:
    """The page's ```python blocks; ``first_line_prefix="# conftest.py"`` keeps the
    blocks that are whole conftest files."""
    return code_blocks(page, "python", first_line_prefix)
