"""Every rule's metadata, without libcst: code, name, message, page text, default.

The command line lists, selects and documents rules from here without importing the
rules themselves (which need libcst); each rule class reads its metadata from here by
its code, so the two never disagree.

One module per rule family (NZ0xx ... NZ5xx); this one gathers them.
"""

from __future__ import annotations

from nozero.lint.catalog import cleaning, meta, periodic, skipping, swallowing, switches
from nozero.lint.catalog.entry import RuleEntry

__all__ = ["ALL_CODES", "CATALOG", "DEFAULT_CODES", "ENTRIES", "RuleEntry", "entry"]

ENTRIES: tuple[RuleEntry, ...] = (
    *meta.ENTRIES,
    *cleaning.ENTRIES,
    *skipping.ENTRIES,
    *swallowing.ENTRIES,
    *switches.ENTRIES,
    *periodic.ENTRIES,
)
CATALOG: dict[str, RuleEntry] = {entry.code: entry for entry in ENTRIES}
ALL_CODES: frozenset[str] = frozenset(CATALOG)
DEFAULT_CODES: frozenset[str] = frozenset(e.code for e in ENTRIES if e.default)


def entry(code: str) -> RuleEntry:
    """The metadata of rule ``code``; KeyError for an unknown code."""
    return CATALOG[code]
