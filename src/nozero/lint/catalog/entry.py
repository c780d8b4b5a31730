"""One rule as users see it, without libcst."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleEntry:
    """One rule as users see it: ``default`` says whether it runs without ``--select``."""

    code: str
    name: str
    message: str
    default: bool
    doc: str

    @property
    def default_enabled(self) -> bool:
        return self.default
