"""Whole-file facts, through one front door.

``FileFacts`` answers what is training signal and what tests it for NaN/Inf (scopes,
flags, same-file helpers); ``reactions`` follows finiteness facts from their sources to
where training reacts to them. Both read the standard library's ``ast`` of the whole
file, so no answer depends on the parts of the file the pre-filter selects.
"""

from __future__ import annotations

import ast

from nozero.lint.facts.flows import Flows, Reaction, Route
from nozero.lint.imports import collect_aliases
from nozero.lint.signal import FileFacts


def file_facts(tree: ast.Module, source: str) -> FileFacts:
    """The facts of one parsed file."""
    return FileFacts(tree, source, collect_aliases(tree))


def reactions(facts: FileFacts) -> list[Reaction]:
    """Every reaction of the file to a non-finite value, computed once per file."""
    if facts.flows is None:
        facts.flows = Flows(facts)
    return facts.flows.reactions()


__all__ = ["FileFacts", "Reaction", "Route", "file_facts", "reactions"]
