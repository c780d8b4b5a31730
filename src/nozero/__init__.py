"""nozero: a non-finite loss or gradient stops training; it is never zeroed or skipped.

The contract's names are loaded on first use: ``nozero lint``, run by pre-commit on every
commit, needs only ``__version__`` and starts a little faster without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nozero.contract import (
        MESSAGE_PATTERN,
        MESSAGE_TEMPLATE,
        NonFiniteError,
        check_finite,
        format_message,
        parse_message,
    )

__all__ = [
    "MESSAGE_PATTERN",
    "MESSAGE_TEMPLATE",
    "NonFiniteError",
    "check_finite",
    "format_message",
    "parse_message",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in __all__:
        from nozero import contract

        value = getattr(contract, name)
        globals()[name] = value  # later lookups find it without this hook
        return value
    raise AttributeError(f"module 'nozero' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
