"""The names the rules are about, in one place: the pre-filter, the signal tracker and
the rules all read them from here so that a word added for a rule is also a trigger."""

from __future__ import annotations

import re

# Functions and tensor methods that test for non-finite values.
PREDICATES = frozenset(
    {"isnan", "isinf", "isfinite", "isneginf", "isposinf", "is_nan", "is_inf", "is_finite"}
)
# Functions and tensor methods that overwrite non-finite values.
SANITIZERS = frozenset({"nan_to_num", "nan_to_num_"})
MASKED_FILL = frozenset({"masked_fill", "masked_fill_"})
# Calls that pick between two values elementwise or as a whole.
SELECTORS = frozenset({"where", "select", "cond", "switch"})
# Exceptions raised for non-finite arithmetic.
NONFINITE_EXCEPTIONS = frozenset(
    {"FloatingPointError", "ArithmeticError", "OverflowError", "NonFiniteError"}
)
# Broad exceptions whose handler is only suspect when it inspects the message.
BROAD_EXCEPTIONS = frozenset({"RuntimeError", "Exception", "BaseException"})
OPTAX_SWITCHES = {
    "apply_if_finite": "NZ401",
    "zero_nans": "NZ402",
    "skip_not_finite": "NZ403",
}
NONFINITE_KEYWORD = "error_if_nonfinite"  # torch clip_grad_norm_
NAN_FILTER_KEYWORD = "logging_nan_inf_filter"  # Hugging Face TrainingArguments
# Calls that check values and raise (a periodic one is the informational rule's concern).
CHECK_CALLS = frozenset({"check_finite", "check_numerics"})

# Calls that stop the program or raise when a check fails.
RAISING_CALLS = frozenset(
    {"check_finite", "check", "check_numerics", "exit", "_exit", "abort", "fail"}
)

# Words whose presence (as a whole word) lets a file or a unit of code hold a finding.
TRIGGER_WORDS = frozenset(
    PREDICATES | SANITIZERS | NONFINITE_EXCEPTIONS | CHECK_CALLS | set(OPTAX_SWITCHES)
    | {NONFINITE_KEYWORD, NAN_FILTER_KEYWORD}
)

# ``x != x`` (the NaN self-test) as text. No anchors, so that a match inside a piece of
# code is also a match in any text containing it (the pre-filter relies on this).
SELF_NOT_EQUAL = re.compile(r"([A-Za-z_][\w.]*)\s*!=\s*\1")
# A string literal's raw text that speaks of non-finite values (``"nan" in str(err)``).
NONFINITE_TEXT = re.compile(r"(?i)\b(?:nan|inf|infinity|non-?finite)\b")

# Training signal by name: identifiers are split into words (snake and camel case).
SIGNAL_WORDS = frozenset(
    {"grad", "grads", "gradient", "gradients", "loss", "losses", "updates", "params",
     "param", "parameters", "gnorm", "criterion"}
)
SIGNAL_NAMES = frozenset(
    {"g", "gs", "dw", "db", "update", "opt_state", "optimizer_state", "optstate",
     "train_state", "trainstate"}
)
# Words that mark a value as a metric, an evaluation score or a plot, never training signal.
METRIC_WORDS = frozenset(
    {"val", "valid", "validation", "eval", "evaluation", "test", "holdout", "metric",
     "metrics", "score", "scores", "acc", "accuracy", "auc", "plot", "hist", "history",
     "display"}
)
# Calls that produce gradients: the callee returns a gradient function (``jax.grad(f)``) ...
GRAD_TRANSFORMS = frozenset(
    {"grad", "value_and_grad", "filter_grad", "filter_value_and_grad"}
)
# ... or the gradients themselves (``torch.autograd.grad``, ``tape.gradient``).
GRAD_CALLS = frozenset({"gradient", "gradients", "compute_gradients"})
# Loss scaling for mixed precision skips steps by design (and lowers the scale).
LOSS_SCALERS = frozenset({"GradScaler", "DynamicScale", "LossScaleOptimizer"})

_WORD_SPLIT = re.compile(r"_+|(?<=[a-z0-9])(?=[A-Z])")


def name_words(identifier: str) -> list[str]:
    """``val_loss`` -> ['val', 'loss']; ``gradNorm`` -> ['grad', 'norm']."""
    return [w.lower() for w in _WORD_SPLIT.split(identifier) if w]


def is_metric_name(identifier: str) -> bool:
    return any(w in METRIC_WORDS for w in name_words(identifier))


def is_signal_name(identifier: str) -> bool:
    """Loss, gradients, updates, parameters or optimizer state by their name."""
    if is_metric_name(identifier):
        return False
    lowered = identifier.lower()
    return lowered in SIGNAL_NAMES or any(w in SIGNAL_WORDS for w in name_words(identifier))
