"""Finiteness tests that name no finiteness word, as text and name screens.

- A comparison of training signal below a limit: ``if loss < limit: <step> else:
  <skip>`` takes the step only for a finite loss (NaN fails every comparison, and an
  infinite loss is above any finite limit), so the ``else`` is where a non-finite loss goes.
- The NaN self-test written as a call: ``x.ne(x)``, ``torch.ne(x, x)``,
  ``np.not_equal(x, x)`` (``x != x`` is ``vocab_text.self_comparisons``).

Part of ``nozero.lint.vocab``'s family: plain text and name screens, no parse, so the
pre-filter can ask them cheaply.
"""

from __future__ import annotations

import re

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
LIMIT_COMPARISON = re.compile(
    r"(?:loss|norm)\w*(?:\.item\(\))?\s*<=?\s*"
    r"(?:[\w.]*?(?:lim|limit|thresh|threshold|max|maximum|bound|upper|cap|ceiling)\w*\b|\d)"
)


def limit_comparisons(text: str, first_only: bool = False) -> list[int]:
    """Offsets of each comparison of a loss or norm below a limit in ``text``. The
    pattern is tried only where ``loss`` or ``norm`` starts (``str.find``), not at every
    offset: this screens every file the pre-filter reads."""
    if "<" not in text:
        return []
    found: list[int] = []
    for word in ("loss", "norm"):
        at = text.find(word)
        while at >= 0:
            if LIMIT_COMPARISON.match(text, at):
                found.append(at)
                if first_only:
                    return found
            at = text.find(word, at + 4)
    return sorted(found)


# ``g.ne(g)``, ``torch.ne(g, g)``, ``np.not_equal(loss, loss)``: a value unequal to itself.
SELF_INEQUALITY_CALL = re.compile(
    r"(?<![\w.])([A-Za-z_][\w.]*)\.ne\(\s*\1\s*\)"
    r"|\b(?:ne|not_equal)\(\s*([A-Za-z_][\w.]*)\s*,\s*\2\s*\)"
)


def self_inequality_calls(text: str, first_only: bool = False) -> list[int]:
    """Offsets of each call that compares a value with itself for inequality."""
    if ".ne(" not in text and "not_equal(" not in text:
        return []
    found = [match.start() for match in SELF_INEQUALITY_CALL.finditer(text)]
    return found[:1] if first_only else found


def implicit_tests(text: str, first_only: bool = False) -> list[int]:
    """Offsets of the finiteness tests of this module (limits, self-inequality calls)."""
    found = limit_comparisons(text, first_only)
    if first_only and found:
        return found
    return sorted(found + self_inequality_calls(text, first_only))


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
