"""Finiteness tests that name no finiteness word, as text and name screens.

- A comparison of training signal below a limit: ``if loss < limit: <step> else:
  <skip>`` takes the step only for a finite loss (NaN fails every comparison, and an
  infinite loss is above any finite limit), so the ``else`` is where a non-finite loss goes.
- The NaN self-test written as a call: ``x.ne(x)``, ``torch.ne(x, x)`` (``x != x`` is
  ``vocab_text.self_comparisons``).
- No test at all, but the same effect on an infinite loss: the loss clamped below a bound
  before the step (``loss = torch.clamp(loss, max=1e4)``) trains on the bound instead.

Part of ``nozero.lint.vocab``'s family: plain text and name screens, no parse, so the
pre-filter can ask them cheaply.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nozero.lint.vocab_names import is_loss_name, name_words, names_gradients

# Last words of a name that holds a limit (``loss_upper_lim``, ``max_norm``, ``thresh``).
LIMIT_WORDS = frozenset(
    {"lim", "limit", "thresh", "threshold", "max", "maximum", "bound", "upper", "cap", "ceiling"}
)
# Words of a value that is a record of past steps or of evaluation, not this step's
# signal (``best_loss``, ``val_loss``, ``avg_loss``): comparing it is bookkeeping.
NOT_THIS_STEP_WORDS = frozenset(
    {
        "best",
        "prev",
        "previous",
        "last",
        "avg",
        "average",
        "mean",
        "running",
        "smooth",
        "smoothed",
        "ema",
        "val",
        "valid",
        "validation",
        "eval",
        "test",
        "min",
        "lowest",
        "target",
        "epoch",
    }
)

# ``loss < self.hparams.loss_upper_lim``, ``grad_norm.item() <= max_norm``, ``loss < 1e4``:
# a name of loss or norm, below a limit's name or a number (the screen; names decide).
# Read around each ``<``: the name before it, the limit after it.
_BELOW = re.compile(r"(?:loss|norm)\w*(?:\.item\(\))?[ \t]*$")
_LIMIT = re.compile(
    r"=?[ \t]*(?:[\w.]*?(?:lim|limit|thresh|threshold|max|maximum|bound|upper|cap|ceiling)"
    r"\w*\b|\d)"
)
LIMIT_COMPARISON = re.compile(_BELOW.pattern.rstrip("$") + "<" + _LIMIT.pattern)


def limit_comparisons(text: str, first_only: bool = False) -> list[int]:
    """Offsets of each comparison of a loss or norm below a limit in ``text``. Only the
    ``<`` signs are visited (``str.find``), a few thousand in a large code base: this
    screens every file the pre-filter reads."""
    found: list[int] = []
    at = text.find("<")
    while at >= 0:
        if _LIMIT.match(text, at + 1) and _BELOW.search(text, max(0, at - 80), at):
            found.append(at)
            if first_only:
                return found
        at = text.find("<", at + 1)
    return found


# ``g.ne(g)``, ``torch.ne(g, g)``, ``np.not_equal(loss, loss)``: a value unequal to itself.
SELF_INEQUALITY_CALL = re.compile(
    r"(?<![\w.])([A-Za-z_][\w.]*)\.ne\(\s*\1\s*\)"
    r"|\b(?:ne|not_equal)\(\s*([A-Za-z_][\w.]*)\s*,\s*\2\s*\)"
)


def _lines_with(
    text: str, words: tuple[str, ...], pattern: re.Pattern[str], first_only: bool
) -> list[int]:
    """Offsets of the lines holding one of ``words`` where ``pattern`` matches: the
    pattern runs on those lines only, never over the whole text."""
    found: list[int] = []
    for word in words:
        at = text.find(word)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            if start not in found and pattern.search(text, start, end):
                found.append(start)
                if first_only:
                    return found
            at = text.find(word, end)
    return sorted(found)


def self_inequality_calls(text: str, first_only: bool = False) -> list[int]:
    """Offsets of the lines that compare a value with itself through a call (one scan,
    for ``.ne(``: ``np.not_equal(x, x)`` is read only on such a line)."""
    return _lines_with(text, (".ne(",), SELF_INEQUALITY_CALL, first_only)


# ``loss = torch.clamp(loss, max=1e4)``, ``loss = loss.clamp(0, 10)``,
# ``loss = tf.clip_by_value(loss, 0.0, 1e4)``: a loss bound to a clamp of itself.
LOSS_CLAMP = re.compile(
    r"\b(\w*loss\w*)\s*=\s*(?:\1\.(?:clamp|clip)\("
    r"|[\w.]*\b(?:clamp|clip|clip_by_value)\(\s*\1\b)"
)


def loss_clamps(text: str, first_only: bool = False) -> list[int]:
    """Offsets of the lines that bind a loss to a clamp of itself."""
    return _lines_with(text, ("clamp(", "clip"), LOSS_CLAMP, first_only)  # two scans


# A lambda whose body names a finiteness predicate (``reject=lambda l: torch.isnan(l)``),
# or such a predicate passed as a value (``reject=torch.isnan``).
PREDICATE_VALUE = re.compile(
    r"lambda\b[^:\n]*:[^\n]*\b(?:isnan|isinf|isfinite|is_nan|is_inf|is_finite)\b"
    r"|[(,=]\s*(?:[\w.]*\.)?(?:isnan|isinf|isfinite)\s*[,)]"
)


def passes_predicates(text: str, helpers: Iterable[str] = ()) -> bool:
    """Might a call in ``text`` pass a finiteness test as an argument: a lambda naming a
    predicate, a predicate itself, or one of ``helpers`` (same-file functions that test)
    written in an argument's place? The screen before a walk over every call."""
    names = "|".join(re.escape(name) for name in helpers)
    if names and re.search(rf"[(,=]\s*(?:{names})\s*[,)]", text):
        return True
    return ("lambda" in text or "is" in text) and bool(PREDICATE_VALUE.search(text))


def implicit_tests(text: str, first_only: bool = False) -> list[int]:
    """Offsets of this module's shapes (limits, self-inequality calls, loss clamps)."""
    found: list[int] = []
    for screen in (limit_comparisons, self_inequality_calls, loss_clamps):
        found += screen(text, first_only)
        if first_only and found:
            return found
    return sorted(found)


def names_limit(identifier: str) -> bool:
    """``loss_upper_lim``, ``max_norm``, ``clip_threshold``: a name that holds a limit."""
    return bool(LIMIT_WORDS.intersection(name_words(identifier)))


def names_step_signal(identifier: str) -> bool:
    """``loss``, ``grad_norm``, ``total_norm``: this step's loss or gradient norm, not a
    record of earlier steps or of evaluation (``best_loss``, ``val_loss``)."""
    words = name_words(identifier)
    if NOT_THIS_STEP_WORDS.intersection(words) or LIMIT_WORDS.intersection(words):
        return False
    return is_loss_name(identifier) or (names_gradients(identifier) and "norm" in words)
