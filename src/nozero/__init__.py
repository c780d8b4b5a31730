"""nozero: a non-finite loss or gradient stops training; it is never zeroed or skipped."""

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
