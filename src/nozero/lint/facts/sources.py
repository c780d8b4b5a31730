"""Where finiteness facts come from: predicates, library helpers, reductions of a flag.

Each source has a polarity: ``True`` when the value being true means "non-finite"
(``isnan``, ``overflow``, ``found_inf``), ``False`` when it means "finite" (``isfinite``,
``is_fin``). The flow pass flips it through ``not`` and ``~``.
"""

from __future__ import annotations

from nozero.lint import vocab

# Predicates: name -> True when a true result means non-finite.
PREDICATE_POLARITY = {
    "isnan": True,
    "isinf": True,
    "isneginf": True,
    "isposinf": True,
    "is_nan": True,
    "is_inf": True,
    "isfinite": False,
    "is_finite": False,
}
assert set(PREDICATE_POLARITY) == vocab.PREDICATES

OVERFLOW_HELPERS = vocab.OVERFLOW_HELPERS
FINITE_HELPERS = vocab.FINITE_HELPERS
BAD_FLAG_NAMES = vocab.BAD_FLAG_NAMES
GOOD_FLAG_NAMES = vocab.GOOD_FLAG_NAMES
# Calls that keep the meaning of the flag they reduce or move.
FLAG_REDUCTIONS = frozenset(
    {
        "all",
        "any",
        "bool",
        "item",
        "float",
        "int",
        "logical_and",
        "logical_or",
        "tree_all",
        "all_reduce",
        "psum",
        "pmax",
        "pmin",
        "pmean",
        "reduce_all",
        "reduce_any",
        "reduce_max",
        "cpu",
        "to",
        "cuda",
        "numpy",
        "tolist",
        "array",
        "asarray",
        "tensor",
        "stack",
        "sum",
        "max",
        "FloatTensor",
        "ByteTensor",
        "IntTensor",
        "squeeze",
        "detach",
        "reduce",
        "all_gather",
    }
)
# Calls that zero gradients (or updates) in place or by value.
ZEROING_CALLS = frozenset(
    {"zero_grad", "zero_", "zeros_like", "zero_grads", "clear_grads", "set_to_zero"}
)
FILL_CALLS = frozenset({"fill_", "fill"})
# Zeroing calls that clear gradients whatever they are called on (an optimizer, a model).
GRADIENT_CLEARING = frozenset({"zero_grad", "zero_grads", "clear_grads"})
