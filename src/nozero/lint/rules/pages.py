"""The rule reference as markdown pages (``docs/rules/``, part of the docs site), rendered
from the registry so that the pages and ``nozero rule NZ101`` never disagree. ``index.md``
is the table of every rule; each rule has its own ``NZxxx.md``.

Regenerate with ``python -m nozero.lint.rules.pages docs/rules``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nozero._atomic import atomic_write_text
from nozero.lint.rules import ALL_RULES
from nozero.lint.rules.base import Rule


def _examples(title: str, examples: list[str]) -> str:
    blocks = "\n".join(f"```python\n{example.rstrip()}\n```\n" for example in examples)
    return f"## {title}\n\n{blocks}"


def render_page(rule: type[Rule]) -> str:
    state = "enabled by default" if rule.default_enabled else "off by default"
    return (
        f"# {rule.code} `{rule.name}`\n\n"
        f"{rule.message} — *{state}*.\n\n"
        f"{rule.doc.strip()}\n\n"
        f"{_examples('Flagged (from the test suite)', rule.INVALID)}\n"
        f"{_examples('Not flagged (from the test suite)', rule.VALID)}"
    )


def render_index() -> str:
    rows = "\n".join(
        f"| [{r.code}]({r.code}.md) | `{r.name}` | {'yes' if r.default_enabled else 'no'} "
        f"| {r.message} |"
        for r in ALL_RULES
    )
    return (
        "# nozero rules\n\n"
        "Generated from the rule registry (`python -m nozero.lint.rules.pages docs/rules`).\n\n"
        "| code | name | default | message |\n| --- | --- | --- | --- |\n"
        f"{rows}\n"
    )


def pages() -> dict[str, str]:
    """File name -> content of every page."""
    return {"index.md": render_index(), **{f"{r.code}.md": render_page(r) for r in ALL_RULES}}


def write_pages(directory: Path) -> None:
    """Write every page atomically (temporary file, then rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        atomic_write_text(directory / name, text)


if __name__ == "__main__":
    write_pages(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rules"))
