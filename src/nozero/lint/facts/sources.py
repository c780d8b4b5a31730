"""Where finiteness facts come from, as the flow pass reads them: the names here are the
tables' (``nozero.lint.tables``), re-exported so that the pass keeps one import.

Each source has a polarity: ``True`` when the value being true means "non-finite"
(``isnan``, ``overflow``, ``found_inf``), ``False`` when it means "finite" (``isfinite``,
``is_fin``). The flow pass flips it through ``not`` and ``~``.
"""

from __future__ import annotations

from nozero.lint.tables.propagation import FLAG_REDUCTIONS
from nozero.lint.tables.reactions import FILL_CALLS, GRADIENT_CLEARING, ZEROING_CALLS
from nozero.lint.tables.sources import (
    BAD_FLAG_NAMES,
    FINITE_HELPERS,
    GOOD_FLAG_NAMES,
    OVERFLOW_HELPERS,
    PREDICATE_POLARITY,
    RANDOM_DRAWS,
)

__all__ = [
    "BAD_FLAG_NAMES",
    "FILL_CALLS",
    "FINITE_HELPERS",
    "FLAG_REDUCTIONS",
    "GOOD_FLAG_NAMES",
    "GRADIENT_CLEARING",
    "OVERFLOW_HELPERS",
    "PREDICATE_POLARITY",
    "RANDOM_DRAWS",
    "ZEROING_CALLS",
]
