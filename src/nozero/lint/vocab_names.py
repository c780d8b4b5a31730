"""Training signal by name: identifiers split into words (snake and camel case) and
classified as gradients, losses, metrics, predictions, labels, models, optimizers,
settings, or non-finite tests and sanitizers. Part of ``nozero.lint.vocab``, which
re-exports every name here; one table of words per kind of name."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

from nozero.lint.tables.sources import EXCEPTION_NAME_ENDINGS
from nozero.lint.vocab_text import (
    is_word_char,
)

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


def names_nonfinite_values(identifier: str) -> bool:
    """Does the name hold a word for non-finite values (``restart_by_nan``,
    ``skip_non_finite``)?"""
    words = set(name_words(identifier))
    return bool(words & _NONFINITE_NAME_WORDS) or "finite" in words


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


@cache
def names_nonfinite_exception(identifier: str) -> bool:
    """Is ``identifier`` an exception class named for a non-finite value (``NanException``,
    ``LossIsNaNError``, ``NonFiniteGradError``), the failure a project raises on one?"""
    words = name_words(identifier.replace("NaN", "Nan"))
    if not identifier[:1].isupper() or len(words) < 2 or words[-1] not in EXCEPTION_NAME_ENDINGS:
        return False
    pairs = set(zip(words, words[1:], strict=False))
    return bool(set(words) & _NONFINITE_NAME_WORDS) or bool(
        pairs & {("non", "finite"), ("not", "finite")}
    )


def nonfinite_exception_names(text: str) -> set[str]:
    """The identifiers in ``text`` named for a project's non-finite exception class."""
    return {identifier_at(text, at) for at in nonfinite_names(text, names_nonfinite_exception)}


def names_nonfinite_helper_or_exception(identifier: str) -> bool:
    """Named for a finiteness test, a cleaning helper or a non-finite exception class."""
    return names_nonfinite_helper(identifier) or names_nonfinite_exception(identifier)


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


def holds_training_state(dotted: str) -> bool:
    """``model``, ``self.net``, ``optimizer``, or ``self`` (a module or a trainer handing
    itself): a helper handed one of these tests or cleans the parameters or gradients it
    holds (``grads_all_finite(optimizer)``, ``zero_nan_grads(model)``)."""
    name = dotted.rsplit(".", 1)[-1]
    if name == "self":
        return True
    named = is_model_name(name) or names_optimizer(name)
    return bool(name) and named and not is_measure_name(name)  # not ``encoder_mask``


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
