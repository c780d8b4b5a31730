"""The calls, keywords, exceptions and flag names the rules look for, and the trigger and
flow word sets built from them: what lets a file or a unit of code hold a finding. Part
of ``nozero.lint.vocab``, which re-exports every name here; add a word here, not there."""

from __future__ import annotations

import re

# Functions and tensor methods that test for non-finite values.
PREDICATES = frozenset(
    {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "is_nan", "is_inf", "is_finite"}
)
# Functions and tensor methods that overwrite non-finite values.
SANITIZERS = frozenset({"nan_to_num", "nan_to_num_"})
MASKED_FILL = frozenset({"masked_fill", "masked_fill_"})
# What a substitution puts in place of a non-finite value: a constant fill (``zeros_like``)
# or a named constant (``jnp.nan``), as opposed to another computed value.
CONSTANT_FILLS = frozenset(
    {
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "full",
        "full_like",
        "fill",
    }
)
# Conversions that are a constant only when what they convert is one (``tensor(0.0)``).
CONSTANT_CONVERSIONS = frozenset({"constant", "array", "asarray", "tensor", "float"})
CONSTANT_NAMES = frozenset({"nan", "inf", "NaN", "Inf", "pi", "e"})
# Calls that pick between two values elementwise or as a whole.
SELECTORS = frozenset({"where", "select", "cond", "switch"})
# Exceptions raised for non-finite arithmetic.
NONFINITE_EXCEPTIONS = frozenset({"FloatingPointError", "ArithmeticError", "NonFiniteError"})
# Broad exceptions whose handler is only suspect when it inspects the message.
BROAD_EXCEPTIONS = frozenset({"RuntimeError", "Exception", "BaseException"})
OPTAX_SWITCHES = {
    "apply_if_finite": "NZ401",
    "zero_nans": "NZ402",
    "skip_not_finite": "NZ403",
}
NONFINITE_KEYWORD = "error_if_nonfinite"  # torch clip_grad_norm_
NAN_FILTER_KEYWORD = "logging_nan_inf_filter"  # Hugging Face TrainingArguments
STABLE_UPDATE = "stable_update"  # numpyro's SVI: keeps the old state on a NaN loss
# Calls that check values and raise (a periodic one is the informational rule's concern).
CHECK_CALLS = frozenset({"check_finite", "check_numerics"})
# torch's anomaly mode: raises a RuntimeError where backward() meets a NaN
ANOMALY_DETECTION = "detect_anomaly"

# Calls that stop the program or raise when a check fails, or stop it in a debugger
# (``pdb.set_trace()``, ``breakpoint()``): an investigation, which is what the rule asks.
RAISING_CALLS = frozenset(
    {"check_finite", "check", "check_numerics", "exit", "_exit", "abort", "fail"}
    | {"set_trace", "breakpoint", "post_mortem"}
)

# Calls that only observe: logging or printing a flag records nothing.
OBSERVING_CALLS = frozenset(
    {
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "log",
        "print",
        "format",
        "log_scalar",
        "log_metrics",
        "log_dict",
        "add_scalar",
        "write",
        "set_postfix",
        "rank_zero_warn",
        "rank_zero_info",
        "print_rank_0",
        "log_dist",
        "str",
        "repr",
        "append",
    }
)

# A function named for one of these trains, whatever it is decorated with or calls
# (``step``, ``train_step``, Lightning's ``training_step``).
STEPPING_NAME_WORDS = frozenset({"step", "train", "training"})

# Calls that apply an optimizer step (a check guarding one skips the step).
UPDATE_CALLS = frozenset({"step", "apply_updates", "apply_gradients", "backward", "minimize"})
# Calls that apply a function to every leaf of a structure (``jax.tree.map(f, grads)``).
MAPPERS = frozenset({"map", "tree_map", "map_structure", "tree_map_with_path"})

# Library helpers that report overflow of fp16 gradients (DeepSpeed's CheckOverflow,
# Megatron/apex style loss scalers): true means an overflow, and they belong to loss
# scaling.
OVERFLOW_HELPERS = frozenset(
    {
        "has_overflow",
        "has_overflow_serial",
        "check_using_norm",
        "_has_inf_or_nan",
        "has_inf_or_nan",
        "is_invalid_grad_norm",
        "check_overflow",
    }
)
# Library helpers whose true result means "all finite" (Keras LossScaleOptimizer's
# ``check_finite``, TF's ``is_all_finite``).
FINITE_HELPERS = frozenset({"check_finite", "all_finite", "is_all_finite", "_is_all_finite"})
# Names that hold a flag when bound from an opaque call or an unpacked result
# (``dynamic_scale, is_fin, aux, grads = grad_fn(...)``, ``found_inf = ...``).
BAD_FLAG_NAMES = frozenset(
    {
        "overflow",
        "has_overflow",
        "found_inf",
        "found_nan",
        "has_nan",
        "has_inf",
        "nan_found",
        "optimizer_step_was_skipped",
        "step_was_skipped",
    }
)
GOOD_FLAG_NAMES = frozenset({"is_fin", "is_finite", "all_finite", "grads_finite", "finite"})
CTC_KEYWORD = "zero_infinity"  # torch CTCLoss
# Words common in comments and strings: the file-level screen accepts them only where
# code binds or reads a flag (``overflow = ...``, ``x.overflow``, ``except OverflowError``).
# apex's ``amp.scale_loss``: its patched ``optimizer.step`` skips the step on overflow.
APEX_SCALE_LOSS = "scale_loss"
# Reductions that leave NaN elements out (``losses.nanmean()``): per-sample NaN losses
# vanish from the loss without a test.
NAN_REDUCTIONS = frozenset({"nanmean", "nansum"})
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
