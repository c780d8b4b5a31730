"""The names the rules are about, in one place: the pre-filter, the signal tracker and
the rules all read them from here so that a word added for a rule is also a trigger."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cache

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

# A string literal that starts with a word for non-finite values (``"nan" in str(err)``),
# read in the raw source text (quote included).
NONFINITE_TEXT = re.compile(r"""(?i)["'](?:nan|inf|infinity|non-?finite)\b""")
_NONFINITE_TEXT_STARTS = tuple(q + w for q in "\"'" for w in ("nan", "inf", "non"))


def holds_nonfinite_text(text: str) -> bool:
    """``NONFINITE_TEXT.search(text)``, tried only where a quote opens one of its words
    (found in one lowercase copy: several times fewer steps than the pattern's scan)."""
    if not text.isascii():  # lowercasing keeps the offsets only in ASCII
        return bool(NONFINITE_TEXT.search(text))
    lowered = text.lower()
    for start in _NONFINITE_TEXT_STARTS:
        at = lowered.find(start)
        while at >= 0:
            if NONFINITE_TEXT.match(text, at):
                return True
            at = lowered.find(start, at + 1)
    return False


# An equality test with infinity (``x == float("inf")``, ``np.inf == x``), in raw text.
INF_COMPARISON = re.compile(
    r"""==\s*[-+]?\s*(?:float\(\s*["'][-+]?inf|(?:\w+\.)*[Ii]nf\b)|\b[Ii]nf\s*=="""
)


def compares_with_inf(text: str) -> bool:
    """Does a line of ``text`` compare with infinity (``x == float("inf")``)? Only lines
    holding both ``inf`` and ``==`` are matched against the pattern."""
    for word in ("inf", "Inf"):
        at = text.find(word)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            line = text[start:end]
            if "==" in line and INF_COMPARISON.search(line):
                return True
            at = text.find(word, end)
    return False


def is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def word_offsets(text: str, words: Iterable[str]) -> list[int]:
    """Where each of ``words`` occurs in ``text`` as a whole word.

    ``str.find`` per word is several times faster than one regular expression with word
    boundaries on large files, and this runs on every file that is linted."""
    found: list[int] = []
    for word in words:
        start = text.find(word)
        while start >= 0:
            end = start + len(word)
            if (start == 0 or not is_word_char(text[start - 1])) and (
                end == len(text) or not is_word_char(text[end])
            ):
                found.append(start)
            start = text.find(word, start + 1)
    return found


def has_word(text: str, word: str) -> bool:
    """Does ``word`` occur in ``text`` as a whole word?"""
    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        if (start == 0 or not is_word_char(text[start - 1])) and (
            end == len(text) or not is_word_char(text[end])
        ):
            return True
        start = text.find(word, end)
    return False


class WordScreen:
    """Does a text hold any of some words, as a whole word? Words sharing a core
    (``isnan``, ``nan_to_num``: ``nan``) are searched only in a text holding the core, so
    that a text without any costs one substring search per core, not one per word."""

    def __init__(self, words: Iterable[str], cores: Iterable[str]) -> None:
        cores = tuple(cores)
        groups: dict[str, list[str]] = {}
        for word in sorted(words):
            core = next((c for c in cores if c in word), word)
            groups.setdefault(core, []).append(word)
        self.groups = tuple((core, tuple(members)) for core, members in groups.items())

    def search(self, text: str) -> bool:
        return any(
            core in text and any(has_word(text, word) for word in members)
            for core, members in self.groups
        )


def self_comparisons(text: str) -> list[int]:
    """Offsets of each ``!=`` that compares a dotted name, or a call of one without
    arguments, with itself as text (``g != g``, ``p.grad!=p.grad``,
    ``loss.item() != loss.item()``), the NaN self-test. Rules accept a self-comparison
    only when this finds it in the comparison's own text, so a file where it finds none
    holds none."""
    found: list[int] = []
    at = text.find("!=")
    while at >= 0:
        left_end = at
        while left_end > 0 and text[left_end - 1].isspace():
            left_end -= 1
        called = text.endswith("()", 0, left_end)
        name_end = left_end - 2 if called else left_end
        left_start = name_end
        while left_start > 0 and _in_dotted_name(text[left_start - 1]):
            left_start -= 1
        right = at + 2
        while right < len(text) and text[right].isspace():
            right += 1
        name = text[left_start:name_end] + ("()" if called and left_start < name_end else "")
        after = right + len(name)
        if (
            name
            and (name[0].isalpha() or name[0] == "_")
            and text.startswith(name, right)
            and (after == len(text) or not _in_dotted_name(text[after]))
        ):
            found.append(at)
        at = text.find("!=", at + 2)
    return found


def _in_dotted_name(char: str) -> bool:
    return is_word_char(char) or char == "."


def binds_flag(text: str) -> bool:
    """``FLAG_TEXT.search(text)``, found from the flag words' occurrences rather than by
    trying the pattern at every position (several times faster on large files)."""
    for word in ("overflow", "finite"):
        at = text.find(word)
        while at >= 0:
            end = at + len(word)
            if end == len(text) or not is_word_char(text[end]):
                if word == "overflow" and at and text[at - 1] == ".":
                    return True
                if (at == 0 or not is_word_char(text[at - 1])) and _ASSIGNED.match(text, end):
                    return True
            at = text.find(word, end)
    at = text.find("OverflowError")
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        if FLAG_TEXT.search(text, line_start, len(text) if line_end < 0 else line_end):
            return True
        at = text.find("OverflowError", at + 1)
    return False


TRIGGER_SCREEN = WordScreen(TRIGGER_WORDS, ("nan", "inf", "inite"))
FLOW_SCREEN = WordScreen(SCREEN_FLOW_WORDS, FLOW_CORES)


# Training signal by name: identifiers are split into words (snake and camel case).
SIGNAL_WORDS = frozenset(
    {
        "grad",
        "grads",
        "gradient",
        "gradients",
        "loss",
        "losses",
        "updates",
        "params",
        "param",
        "parameters",
        "gnorm",
        "criterion",
    }
)
SIGNAL_NAMES = frozenset(
    {
        "g",
        "gs",
        "update",
        "opt_state",
        "optimizer_state",
        "optstate",
        "train_state",
        "trainstate",
        "trainable_variables",  # Keras and TF: a model's parameters
        "trainable_weights",
    }
)
# Short names that are gradients only where gradients are handled (elsewhere ``g`` is a
# graph or a random generator).
AMBIGUOUS_SIGNAL_NAMES = frozenset({"g", "gs"})
# What only a graph or a random generator has (``g.in_degrees()``, ``g.ndata``,
# ``g.manual_seed(0)``): a ``g`` used so is no gradient, wherever it is.
GRAPH_OR_GENERATOR_ATTRIBUTES = frozenset(
    {
        "in_degrees",
        "out_degrees",
        "ndata",
        "edata",
        "srcdata",
        "dstdata",
        "number_of_nodes",
        "number_of_edges",
        "num_nodes",
        "num_edges",
        "add_edges",
        "add_nodes",
        "add_self_loop",
        "update_all",
        "apply_edges",
        "local_scope",
        "successors",
        "predecessors",
        "edge_index",
        "manual_seed",
        "initial_seed",
        "get_state",
        "set_state",
    }
)
# Words of a name that handles gradients, and names that only set the autograd mode.
GRADIENT_WORDS = frozenset(
    {"grad", "grads", "gradient", "gradients", "gnorm", "updates", "backward"}
)
GRAD_MODE_NAMES = frozenset(
    {
        "requires_grad",
        "requires_grad_",
        "no_grad",
        "enable_grad",
        "set_grad_enabled",
        "is_grad_enabled",
    }
)
# Words that mark a value as a metric, an evaluation score, a sampler's statistic or a
# plot, never training signal (an MCMC proposal that diverges is accepted with
# probability 0: ``accept_prob = where(isfinite(p), p, 0)`` is its definition).
METRIC_WORDS = frozenset(
    {
        "accept",
        "acceptance",
        "val",
        "valid",
        "validation",
        "eval",
        "evaluation",
        "test",
        "holdout",
        "metric",
        "metrics",
        "score",
        "scores",
        "acc",
        "accuracy",
        "auc",
        "roc",
        "precision",
        "recall",
        "f1",
        "fbeta",
        "iou",
        "bleu",
        "rouge",
        "perplexity",
        "ppl",
        "psnr",
        "ssim",
        "evaluate",
        "confusion",
        "hamming",
        "sklearn",
        "plot",
        "hist",
        "history",
        "display",
    }
)
# Calls that turn a tensor into plain numbers: what they give is logged or compared,
# and no gradient flows back through it.
TO_NUMBER = frozenset({"float", "int", "item", "numpy", "tolist"})
# Calls through which no gradient flows back: what is made with them from a model's
# output (``bins = floor(score * n).long()``) is a target, not part of the prediction.
NO_GRADIENT_CALLS = TO_NUMBER | {
    "detach",
    "stop_gradient",
    "floor",
    "round",
    "argmax",
    "argmin",
    "long",
    "one_hot",
    "bucketize",
    "digitize",
}
# Calls that mark a function as one that only observes values: evaluation, plots,
# metrics (unless it also trains: see TRAINING_CALLS).
OBSERVING_MARKERS = frozenset(
    {
        "eval",
        "no_grad",
        "inference_mode",
        "predict",
        "plot",
        "scatter",
        "hist",
        "imshow",
        "savefig",
        "log_metrics",
        "add_scalar",
        "set_postfix",
        "stop_gradient",
    }
)
# Calls that compute gradients or change parameters, besides UPDATE_CALLS.
# Last words of a name for an optimizer (``optimizer``, ``self.g_opt``).
OPTIMIZER_NAME_WORDS = frozenset({"optimizer", "opt", "optim"})


def names_optimizer(name: str) -> bool:
    """``optimizer``, ``opt``, ``self.g_optimizer``: a torch optimizer, by its last word."""
    words = name_words(name)
    return bool(words) and words[-1] in OPTIMIZER_NAME_WORDS


# Words of a function named for evaluation (``validate``, ``validation_step``, ``_val``). A
# name alone never exempts code that steps or computes gradients (``train_and_evaluate``
# trains); it marks an evaluation that runs without ``no_grad`` (JAX has none).
EVALUATION_NAME_WORDS = frozenset(
    {
        "eval",
        "evaluate",
        "evaluation",
        "evaluating",
        "validate",
        "validation",
        "validating",
        "test",
        "testing",
        "predict",
        "inference",
    }
)
# ... and ``val`` as a name's first word (``val_step``, ``_val``; ``clip_val`` clips a value).
EVALUATION_FIRST_WORDS = frozenset({"val"})


# ... unless the name also says it trains (numpyro's ``eval_and_stable_update``).
_TRAINING_NAME_WORDS = frozenset({"update", "updates", "train", "training", "fit", "optimize"})


def names_evaluation(name: str) -> bool:
    words = name_words(name)
    if _TRAINING_NAME_WORDS.intersection(words):
        return False
    return bool(EVALUATION_NAME_WORDS.intersection(words)) or (
        bool(words) and words[0] in EVALUATION_FIRST_WORDS
    )


TRAINING_CALLS = frozenset(
    {
        "grad",
        "value_and_grad",
        "gradient",
        "gradients",
        "zero_grad",
        "apply_gradients",
        "update",
        "train",
    }
)
# Calls that produce gradients: the callee returns a gradient function (``jax.grad(f)``) ...
GRAD_TRANSFORMS = frozenset({"grad", "value_and_grad", "filter_grad", "filter_value_and_grad"})
# ... or the gradients themselves (``torch.autograd.grad``, ``tape.gradient``).
GRAD_CALLS = frozenset(
    {
        "gradient",
        "gradients",
        "compute_gradients",
        "clip_grad_norm_",
        "clip_grad_norm",
        "get_grad_norm",
        "global_norm",
        "clip_gradients",
    }
)

_WORD_SPLIT = re.compile(r"_+|(?<=[a-z0-9])(?=[A-Z])")


def name_words(identifier: str) -> list[str]:
    """``val_loss`` -> ['val', 'loss']; ``gradNorm`` -> ['grad', 'norm']."""
    return [w.lower() for w in _WORD_SPLIT.split(identifier) if w]


# A name that says it tests for non-finite values (``has_nan_or_inf``, ``is_gradient_nan``,
# ``found_inf_flag``; ``grads_are_finite``): a call of such a helper from another file, or
# a name bound from an opaque call, is read as that test.
_NONFINITE_NAME_WORDS = frozenset(
    {"nan", "nans", "inf", "infs", "nonfinite", "notfinite", "infinite"}
)
_TEST_NAME_WORDS = frozenset(
    {"is", "has", "any", "contains", "contain", "check", "detect", "detected", "found"}
    | {"got", "exists", "all", "are"}
)
_NEGATION_WORDS = frozenset({"not", "no", "non"})
# ... unless it says it raises or does something else (``assert_tree_all_finite``,
# ``nan_error_check``, ``nan_if_all_nan``)
_NOT_A_TEST_WORDS = frozenset({"assert", "raise", "raises", "error", "if", "to", "hook"})
# The substrings every such name holds (a cheap first screen before the word split),
# and the lowercase letters that may follow one inside such a word (``nans``, ``infinite``).
NONFINITE_NAME_CORES = ("nan", "Nan", "NaN", "inf", "Inf", "finite", "Finite")
_CORE_ENDINGS = frozenset("si")


@cache
def nonfinite_name_polarity(identifier: str) -> bool | None:
    """True for a name of a test that holds when a value is not finite (``has_nan``),
    False for one that holds when all are finite (``grads_are_finite``), None for any
    other name (``nan_count``, ``neg_inf``, ``is_inference``)."""
    words = name_words(identifier)
    if len(words) < 2 or is_measure_name(identifier) or is_metric_name(identifier):
        return None
    if not _TEST_NAME_WORDS.intersection(words) or _NOT_A_TEST_WORDS.intersection(words):
        return None
    negated = bool(_NEGATION_WORDS.intersection(words))
    if _NONFINITE_NAME_WORDS.intersection(words):
        return not negated
    if "finite" in words:
        return negated
    return None


# ... and those of a helper that cleans values (``replace_nan``, ``nan_to_zero``,
# ``nan_to_num_hook``, ``clean_infs``), but not ``divide_no_nan`` (safe division) or a
# name that tests, counts or raises.
_SANITIZING_WORDS = frozenset(
    {"replace", "remove", "fix", "clean", "zero", "zeros", "fill", "drop", "to"}
    | {"sanitize", "sanitise", "scrub", "purge", "strip", "filter"}
)
_NOT_SANITIZING_AS_LEAD = frozenset({"assert", "raise", "raises", "error", "safe", "count"})
_NOT_SANITIZING_WORDS = _TEST_NAME_WORDS | _NEGATION_WORDS | _NOT_SANITIZING_AS_LEAD | {"if"}


@cache
def names_sanitizer(identifier: str) -> bool:
    """Is ``identifier`` named for replacing non-finite values (``replace_nan``)?"""
    ordered = [word.lower() for word in name_words(identifier)]
    words = set(ordered)
    pairs = list(zip(ordered, ordered[1:], strict=False))
    into_nonfinite = any(  # ``inf_to_nan``: the value is made NaN, not hidden
        a == "to" and b in _NONFINITE_NAME_WORDS for a, b in pairs
    )
    if ("non", "finite") in pairs or ("not", "finite") in pairs:
        words.add("nonfinite")
    # a name that starts by cleaning says what it does before its condition
    # (``zero_all_if_any_non_finite``); elsewhere ``if``, ``any`` or ``non`` mark a test
    leads = ordered[:1] != ["to"] and bool(set(ordered[:1]) & _SANITIZING_WORDS)
    excluded = _NOT_SANITIZING_AS_LEAD if leads else _NOT_SANITIZING_WORDS
    return (
        len(words) >= 2
        and not into_nonfinite
        and bool(words & _NONFINITE_NAME_WORDS)
        and bool(words & _SANITIZING_WORDS)
        and not words & excluded
        and not is_metric_name(identifier)
    )


def nonfinite_test_names(text: str, first_only: bool = False) -> list[int]:
    """Offsets of the identifiers in ``text`` named for a finiteness test."""
    return nonfinite_names(text, nonfinite_name_polarity_known, first_only)


def nonfinite_name_polarity_known(identifier: str) -> bool:
    return nonfinite_name_polarity(identifier) is not None


def names_nonfinite_helper(identifier: str) -> bool:
    """Named for a finiteness test or for cleaning non-finite values."""
    return nonfinite_name_polarity_known(identifier) or names_sanitizer(identifier)


def sanitizer_names(text: str) -> set[str]:
    """The identifiers in ``text`` named for a helper that cleans non-finite values."""
    return {identifier_at(text, at) for at in nonfinite_names(text, names_sanitizer)}


def identifier_at(text: str, start: int) -> str:
    end = start
    while end < len(text) and is_word_char(text[end]):
        end += 1
    return text[start:end]


def nonfinite_names(
    text: str, accepts: Callable[[str], bool], first_only: bool = False
) -> list[int]:
    """Offsets of the identifiers in ``text`` of two or more words, one of them about
    non-finite values, that ``accepts`` takes."""
    found: list[int] = []
    seen: set[int] = set()
    # one lowercase copy and three searches instead of seven (offsets only stay put in
    # ASCII text)
    searched, cores = (
        (text.lower(), ("nan", "inf", "finite"))
        if text.isascii()
        else (
            text,
            NONFINITE_NAME_CORES,
        )
    )
    for core in cores:
        at = searched.find(core)
        while at >= 0:
            start, end = at, at + len(core)
            follows = text[end : end + 1]
            joined = follows == "_" or text[start - 1 : start] == "_" or text[at].isupper()
            if not joined or (follows.islower() and follows not in _CORE_ENDINGS):
                # a word of its own (``isnan``, ``info``, ``inference``): a name of two or
                # more words joins them with ``_`` or capitals
                at = searched.find(core, end)
                continue
            while start and is_word_char(text[start - 1]):
                start -= 1
            name = identifier_at(text, start)
            end = start + len(name)
            if start not in seen and accepts(name):
                if first_only:
                    return [start]
                seen.add(start)
                found.append(start)
            at = searched.find(core, end)
    return sorted(found)


@cache
def names_gradients(identifier: str) -> bool:
    """``grads``, ``grad_norm``, ``backward``; not ``requires_grad`` or ``no_grad``."""
    return identifier not in GRAD_MODE_NAMES and bool(
        GRADIENT_WORDS.intersection(name_words(identifier))
    )


@cache
def is_metric_name(identifier: str) -> bool:
    words = name_words(identifier)
    if len(words) > 1 and words[-1] == "val" and words[-2] in SIGNAL_WORDS:
        words = words[:-1]  # ``loss_val``: the loss's value (``val_loss`` is validation's)
    return any(w in METRIC_WORDS for w in words)


# Words of a mapping kept for the logs (``stats["step_rejected"] = reject``,
# ``metrics = dict(...)``): a flag stored there is reported, not acted on.
LOG_RECORD_WORDS = frozenset(
    {"stats", "metrics", "logs", "summary", "summaries", "scalars", "history", "histories"}
)


def is_log_record_name(identifier: str) -> bool:
    return bool(LOG_RECORD_WORDS.intersection(name_words(identifier)))


# Words that mark a name as a setting (``max_grad_norm``, ``cfg.loss_weight``,
# ``threshold``), never training signal itself: inf there often means "off".
CONFIG_WORDS = frozenset(
    {
        "config",
        "cfg",
        "dataset",
        "preprocessing",
        "conf",
        "args",
        "hparams",
        "opts",
        "options",
        "settings",
        "threshold",
        "thresh",
        "limit",
        "max",
        "min",
        "clip",
        "tol",
        "tolerance",
        "eps",
        "epsilon",
        "weight",
        "weights",
        "coef",
        "coeff",
        "factor",
    }
)


@cache
def is_config_name(identifier: str) -> bool:
    return any(w in CONFIG_WORDS for w in name_words(identifier))


# What a model's output is called, and what computes one: a value cleaned on its way to
# the loss hides a NaN the model produced (``logits = torch.nan_to_num(logits)``).
PREDICTION_WORDS = frozenset(
    {
        "logits",
        "logit",
        "preds",
        "pred",
        "predictions",
        "prediction",
        "hat",  # ``y_hat``
        "recon",  # an autoencoder's reconstruction
        "reconstruction",
        "reconstructions",
    }
)
MODEL_WORDS = frozenset(
    {
        "model",
        "net",
        "network",
        "module",
        "forward",
        "apply",
        "head",
        "proj",
        "projection",
        "classifier",
        "encoder",
        "decoder",
        "backbone",
        "mlp",
        "transformer",
        "unet",
        "autoencoder",
        "denoiser",
        "actor",  # reinforcement learning's policy and value networks
        "critic",
        "policy",
        "generator",  # a GAN's two networks
        "discriminator",
    }
)
# Calls and functions that compute a loss (``criterion``, ``softmax_cross_entropy``).
LOSS_WORDS = frozenset(
    {"loss", "losses", "criterion", "entropy", "crossentropy", "nll", "mse", "penalty"}
)


@cache
def is_prediction_name(identifier: str) -> bool:
    """A model's output by its name (``logits``, ``y_pred``); ``logit_length`` is a size."""
    words = name_words(identifier)
    return any(w in PREDICTION_WORDS for w in words) and not is_measure_name(identifier)


# Words of a name for what the data says the answer is (``target``, ``y_labels``).
LABEL_WORDS = frozenset({"target", "targets", "label", "labels", "gt", "truth"})


@cache
def is_label_name(identifier: str) -> bool:
    words = name_words(identifier)
    return any(w in LABEL_WORDS for w in words) and not is_prediction_name(identifier)


@cache
def is_model_name(identifier: str) -> bool:
    return not is_metric_name(identifier) and any(w in MODEL_WORDS for w in name_words(identifier))


@cache
def is_loss_name(identifier: str) -> bool:
    return not is_metric_name(identifier) and any(w in LOSS_WORDS for w in name_words(identifier))


# Words that make a name about the signal's size, kind, identity or elements, not its
# values (``param_size``, ``num_params``, ``grad_dtype``, ``loss_names``, ``loss_mask``).
MEASURE_WORDS = frozenset(
    {
        "size",
        "sizes",
        "count",
        "counts",
        "num",
        "numel",
        "nbytes",
        "bytes",
        "shape",
        "shapes",
        "ndim",
        "dtype",
        "dtypes",
        "device",
        "devices",
        "name",
        "names",
        "id",
        "ids",
        "idx",
        "index",
        "indices",
        "len",
        "length",
        "keys",
        "mask",
        "masks",
    }
)


def is_measure_name(identifier: str) -> bool:
    """A size, count or kind by its name (``num_params``, ``notfinite_count``)."""
    return any(w in MEASURE_WORDS for w in name_words(identifier))


@cache
def is_signal_name(identifier: str) -> bool:
    """Loss, gradients, updates, parameters or optimizer state by their name."""
    if is_metric_name(identifier) or is_config_name(identifier) or is_measure_name(identifier):
        return False
    lowered = identifier.lower()
    words = name_words(identifier)
    if words[:1] == ["from"]:
        return False  # ``Dataset.from_parameters(...)``: a constructor
    if lowered in AMBIGUOUS_SIGNAL_NAMES and identifier != lowered:
        return False  # ``B, T, H, G, D = q.shape``: a size
    return lowered in SIGNAL_NAMES or any(w in SIGNAL_WORDS for w in words)
