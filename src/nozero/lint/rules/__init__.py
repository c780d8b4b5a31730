"""The rule registry: every rule class, in code order."""

from __future__ import annotations

from nozero.lint.rules import flow, info, meta, replace, swallow, switches
from nozero.lint.rules.base import Rule

ALL_RULES: list[type[Rule]] = sorted(
    [*meta.RULES, *replace.RULES, *flow.RULES, *swallow.RULES, *switches.RULES, *info.RULES],
    key=lambda rule: rule.code,
)
_BY_CODE = {rule.code: rule for rule in ALL_RULES}


def get_rule(code: str) -> type[Rule]:
    """The rule class for ``code``; KeyError for an unknown code."""
    return _BY_CODE[code]


__all__ = ["ALL_RULES", "Rule", "get_rule"]
