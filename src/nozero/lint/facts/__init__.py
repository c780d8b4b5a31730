"""Whole-file facts, through one front door.

- ``scopes``: ``FileFacts``, what is training signal and what tests it for NaN/Inf in
  each function's scope, and what same-file helpers return, test, clean or raise;
- ``sources``: the sources and reactions the flow pass reads, from ``nozero.lint.tables``;
- ``flows``: ``reactions`` follows those facts from their sources to where training
  reacts to them.

All read the standard library's ``ast`` of the whole file, so no answer depends on the
parts of the file the pre-filter selects. The flow pass is imported when first asked for:
a run whose files hold no trigger needs none of it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import TYPE_CHECKING

from nozero.lint.facts.scopes import FileFacts
from nozero.lint.imports import collect_aliases

if TYPE_CHECKING:
    from nozero.lint.facts.flows import Reaction
    from nozero.lint.summary import Helper


def file_facts(
    tree: ast.Module,
    source: str,
    *,
    test_module: bool = False,
    imported: Mapping[str, Helper] | None = None,
) -> FileFacts:
    """The facts of one parsed file; in a test module, all of its code is test code.
    ``imported``: what the helpers this file imports from its project do."""
    aliases = collect_aliases(tree)
    return FileFacts(tree, source, aliases, test_module=test_module, imported=imported)


def reactions(facts: FileFacts) -> list[Reaction]:
    """Every reaction of the file to a non-finite value, computed once per file."""
    from nozero.lint.facts.flows import Flows

    if facts.flows is None:
        facts.flows = Flows(facts)
    return facts.flows.reactions()


__all__ = ["FileFacts", "file_facts", "reactions"]
