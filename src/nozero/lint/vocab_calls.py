"""The trigger and flow word sets the file screens are built from, and the few words
the rules look for beyond the tables: what lets a file or a unit of code hold a finding.
The sources, propagation steps, reactions and library switches themselves live in
``nozero.lint.tables``; this module re-exports them under their old names. Part of
``nozero.lint.vocab``, which re-exports every name here."""

from __future__ import annotations

import re

from nozero.lint.tables.propagation import MAPPERS, SELECTORS
from nozero.lint.tables.reactions import (
    CHECK_CALLS,
    CONSTANT_CONVERSIONS,
    CONSTANT_FILLS,
    CONSTANT_NAMES,
    MASKED_FILL,
    NAN_REDUCTIONS,
    OBSERVING_CALLS,
    RAISING_CALLS,
    SANITIZERS,
    UPDATE_CALLS,
)
from nozero.lint.tables.sources import (
    BAD_FLAG_NAMES,
    BROAD_EXCEPTIONS,
    FINITE_HELPERS,
    GOOD_FLAG_NAMES,
    NONFINITE_EXCEPTIONS,
    OVERFLOW_HELPERS,
    PREDICATES,
    SCALER_TYPES,
)
from nozero.lint.tables.switches import (
    ANOMALY_DETECTION,
    APEX_SCALE_LOSS,
    CTC_KEYWORD,
    NAN_FILTER_KEYWORD,
    NONFINITE_KEYWORD,
    OPTAX_SWITCHES,
    STABLE_UPDATE,
)

__all__ = [
    "ANOMALY_DETECTION",
    "APEX_SCALE_LOSS",
    "BAD_FLAG_NAMES",
    "BROAD_EXCEPTIONS",
    "CHECK_CALLS",
    "COMMON_FLOW_WORDS",
    "CONSTANT_CONVERSIONS",
    "CONSTANT_FILLS",
    "CONSTANT_NAMES",
    "CTC_KEYWORD",
    "FINITE_HELPERS",
    "FLAG_TEXT",
    "FLOW_CORES",
    "FLOW_WORDS",
    "GOOD_FLAG_NAMES",
    "MAPPERS",
    "MASKED_FILL",
    "NAN_FILTER_KEYWORD",
    "NAN_REDUCTIONS",
    "NONFINITE_EXCEPTIONS",
    "NONFINITE_KEYWORD",
    "OBSERVING_CALLS",
    "OPTAX_SWITCHES",
    "OVERFLOW_HELPERS",
    "PREDICATES",
    "RAISING_CALLS",
    "SANITIZERS",
    "SCREEN_FLOW_WORDS",
    "SELECTORS",
    "SETTING_SUFFIXES",
    "STABLE_UPDATE",
    "STEPPING_NAME_WORDS",
    "TRIGGER_WORDS",
    "UPDATE_CALLS",
]

# A function named for one of these trains, whatever it is decorated with or calls
# (``step``, ``train_step``, Lightning's ``training_step``).
STEPPING_NAME_WORDS = frozenset({"step", "train", "training"})

# Words common in comments and strings: the file-level screen accepts them only where
# code binds or reads a flag (``overflow = ...``, ``x.overflow``, ``except OverflowError``).
COMMON_FLOW_WORDS = frozenset({"overflow", "finite", "OverflowError"})
FLAG_TEXT = re.compile(
    r"\.overflow\b|\b(?:overflow|finite)\b[\s)\],]*=(?!=)|except\b[^\n:]*\bOverflowError\b"
)
_ASSIGNED = re.compile(r"[\s)\],]*=(?!=)")
# Settings matched as the end of a name too (``ctc_zero_infinity``).
SETTING_SUFFIXES = (CTC_KEYWORD,)
# Words only the flow pass and the opt-in switches need: a file holding one is read whole
# by ``ast`` (the flows), but they send no unit to libcst.
FLOW_WORDS = frozenset(
    OVERFLOW_HELPERS
    | FINITE_HELPERS
    | BAD_FLAG_NAMES
    | GOOD_FLAG_NAMES
    | {"OverflowError", CTC_KEYWORD, "scaler", "_scaler", "grad_scaler", "loss_scaler"}
    | SCALER_TYPES  # the line that builds a scaler (NZ406)
    | {APEX_SCALE_LOSS}
    | NAN_REDUCTIONS
)
SCREEN_FLOW_WORDS = FLOW_WORDS - COMMON_FLOW_WORDS
# Substrings at least one of which every flow word, and FLAG_TEXT's every match, holds:
# a cheap first screen before the word search.
FLOW_CORES = (
    "nanmean",
    "nansum",
    "overflow",
    "Overflow",
    "check_using_norm",
    "inf_or_nan",
    "invalid_grad_norm",
    "finite",
    "found_",
    "has_nan",
    "has_inf",
    "nan_found",
    "was_skipped",
    "is_fin",
    CTC_KEYWORD,
    "scaler",
    "Scale",  # GradScaler, DynamicScale, LossScaleOptimizer
    APEX_SCALE_LOSS,
)
assert all(any(core in word for core in FLOW_CORES) for word in FLOW_WORDS)

# Words whose presence (as a whole word) lets a file or a unit of code hold a finding.
TRIGGER_WORDS = frozenset(
    PREDICATES
    | SANITIZERS
    | NONFINITE_EXCEPTIONS
    | CHECK_CALLS
    | set(OPTAX_SWITCHES)
    | {NONFINITE_KEYWORD, NAN_FILTER_KEYWORD, CTC_KEYWORD, STABLE_UPDATE}
    | {ANOMALY_DETECTION}
)
