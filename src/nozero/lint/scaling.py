"""Is a dynamic loss scaler at work here? Decided by what the code does, not by words.

fp16 dynamic loss scaling skips a step on overflow and lowers the scale; that skip is
the opt-in rule's (NZ406). A skip belongs to it only where the code shows a scaler at
work: the scale is adjusted (``cur_scale /= factor``, ``loss_scale *= backoff``,
``self._update_scale(overflow)``), or a scaler object's own API is used
(``scaler.step(opt)``, ``scaler.update()``, ``amp.scale_loss``, flax ``DynamicScale``,
Keras ``LossScaleOptimizer``). A flag's name alone (``found_inf``, ``overflow``) is no
evidence: a plain loop that skips on it is clear zero-and-continue.
"""

from __future__ import annotations

import ast
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable
from functools import lru_cache

from nozero.lint import vocab
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.lines import line_starts
from nozero.lint.tables.sources import SCALER_TYPES

# Calls that adjust or apply a dynamic loss scale wherever they appear.
SCALE_CALLS = frozenset(
    {
        "_update_scale",
        "update_scale",
        "update_loss_scale",
        "scale_loss",
        "unscale_",
        "get_scaled_loss",
        "get_unscaled_gradients",
    }
)
# Calls that move the scale, made by the scaler's own code (``self._update_scale(...)``).
_SCALE_UPDATES = frozenset({"_update_scale", "update_scale", "update_loss_scale"})
# Methods of a loss-scale object (``dynamic_scale.update``, ``loss_scale.assign``) that
# move the scale or compute gradients through it (jmp's ``loss_scale.adjust(finite)``).
_SCALE_METHODS = frozenset({"update", "adjust", "value_and_grad", "grad", "assign", "assign_add"})
# Operands that grow or shrink a scale (``scale * backoff_factor``).
_FACTOR_WORDS = frozenset({"factor", "backoff", "growth", "multiplier"})
# What a scaler object does while training (not ``state_dict``: checkpointing it).
_SCALER_API = frozenset(
    {
        "step",
        "update",
        "scale",
        "unscale_",
        "get_scale",
        "loss_scale",
        "cur_scale",
        "update_scale",
        "check_overflow",
        "has_overflow",
    }
)
# What a scaler-wrapped optimizer reports (accelerate's ``optimizer_step_was_skipped``,
# true only when its GradScaler found Inf/NaN gradients and skipped the step): a flag
# read from it is the scaler's own, though nothing else in the function scales.
SKIP_REPORTS = frozenset({"optimizer_step_was_skipped", "step_was_skipped"})
# Members of a flax ``DynamicScale``: counting finite steps is growing the scale.
_SCALE_MEMBERS = frozenset({"fin_steps", "growth_interval", "backoff_factor", "growth_factor"})


# Every piece of evidence below names a scale or one of a scale's members: code whose
# text holds none of these shows no scaler at work, and is not walked.
_EVIDENCE_TEXT = ("scale", "Scale", *_SCALE_MEMBERS)


def scaler_in_lines(
    nodes: Iterable[ast.AST], source: str, first: int, last: int, *, implemented: bool = False
) -> bool:
    """``scaler_at_work(nodes, implemented=...)`` for nodes on lines ``first..last`` of
    ``source``, answered from the text alone when those lines name no scale."""
    lines = _evidence_lines(source)
    at = bisect_left(lines, first)
    return at < len(lines) and lines[at] <= last and scaler_at_work(nodes, implemented=implemented)


@lru_cache(maxsize=2)
def _evidence_lines(source: str) -> list[int]:
    starts = line_starts(source)
    found = set()
    for word in _EVIDENCE_TEXT:
        at = source.find(word)
        while at >= 0:
            found.add(bisect_right(starts, at))
            at = source.find(word, at + 1)
    return sorted(found)


def scaler_at_work(nodes: Iterable[ast.AST], *, implemented: bool = False) -> bool:
    """Do the nodes show a dynamic loss scaler at work (the scale adjusted, or a scaler
    object's own API used)? ``implemented``: only a scaler's own implementation counts
    (the scale adjusted, a scaler class, a scale's members), not a scaler being used: a
    trainer class holding a ``GradScaler`` also has code of its own that zeroes NaN
    gradients, and that code is not the scaler's."""
    evidence = _implementation if implemented else _evidence
    return any(evidence(node) for node in nodes)


def _implementation(node: ast.AST) -> bool:
    if isinstance(node, ast.ClassDef):  # a scaler, or a subclass of one
        bases = {(dotted_name(b) or "").rsplit(".", 1)[-1] for b in node.bases}
        return node.name in SCALER_TYPES or bool(bases & SCALER_TYPES)
    if isinstance(node, ast.Attribute):
        return node.attr in _SCALE_MEMBERS
    if isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        on_self = not isinstance(func, ast.Attribute) or dotted_name(func.value) == "self"
        return called in _SCALE_UPDATES and on_self
    if isinstance(node, ast.AugAssign | ast.Assign):
        return _evidence(node)
    return False


def _evidence(node: ast.AST) -> bool:
    if isinstance(node, ast.ClassDef):
        return node.name in SCALER_TYPES  # the scaler's own implementation
    if isinstance(node, ast.Name):
        return node.id in SCALER_TYPES
    if isinstance(node, ast.Attribute):
        if node.attr in SCALER_TYPES or node.attr in _SCALE_MEMBERS:
            return True
        # ``scaler.step``, ``optimizer.scaler.loss_scale``; saving its state is no work
        return node.attr in _SCALER_API and "scaler" in _words(node.value)
    if isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in SCALE_CALLS:
            return True
        return (
            isinstance(func, ast.Attribute)
            and called in _SCALE_METHODS
            and _names_a_loss_scale(func.value)
        )
    if isinstance(node, ast.AugAssign):
        if isinstance(node.op, ast.Add | ast.Sub):  # ``self.lg_loss_scale -= 1``: a log2 scale
            words = set(_words(node.target))
            return "scale" in words and bool(words & {"lg", "log", "log2"})
        return isinstance(node.op, ast.Mult | ast.Div) and _scale_stepped(node.target, node.value)
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        return _scale_adjusted(node.targets[0], node.value)
    return False


# Words that make a ``scale`` a loss scale (``loss_scale``, ``dynamic_scale``); a bare
# ``scale`` counts too. A kernel's ``length_scale`` or a ``noise_scale`` is no loss scale.
_LOSS_SCALE_WORDS = frozenset({"loss", "cur", "dynamic", "grad", "lg", "log2", "fp16", "amp"})


def _names_a_loss_scale(node: ast.AST) -> bool:
    words = _words(node)
    return words == ["scale"] or ("scale" in words and bool(_LOSS_SCALE_WORDS & set(words)))


def _scale_stepped(target: ast.expr, by: ast.expr) -> bool:
    """``cur_scale /= self.scale_factor``, ``loss_scale *= 2``: a loss scale grown or
    backed off by a factor. Adafactor's ``update_scale *= param_scale`` scales the
    learning rate, no loss."""
    target_words = _words(target)
    if "scale" not in target_words:
        return False
    factor = (isinstance(by, ast.Constant) and isinstance(by.value, int | float)) or bool(
        _FACTOR_WORDS.intersection(_words(by))
    )
    return factor or bool({"loss", "cur", "dynamic"}.intersection(target_words))


def _scale_adjusted(target: ast.expr, value: ast.expr) -> bool:
    """``self.cur_scale = max(self.cur_scale / self.scale_factor, self.min_scale)``: a
    scale set from itself, or from a scale times a growth or backoff factor."""
    if "scale" not in _words(target):
        return False
    name = dotted_name(target)
    for node in ast.walk(value):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div)):
            continue
        operands = (node.left, node.right)
        if name and any(dotted_name(o) == name for o in operands):
            return True
        if any("scale" in _words(o) for o in operands) and any(
            _FACTOR_WORDS.intersection(_words(o)) for o in operands
        ):
            return True
    return False


def scaler_call(node: ast.AST, methods: Collection[str]) -> bool:
    """``scaler.step(opt)``, ``self.grad_scaler.update()``: one of ``methods`` called on
    an object named for a scaler."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in methods
        and "scaler" in _words(node.func.value)
    )


def _words(node: ast.AST) -> list[str]:
    """The words of the last part of a name (``self.optimizer.scaler`` -> ['scaler'])."""
    if isinstance(node, ast.Call):
        node = node.func
    dotted = dotted_name(node)
    return vocab.name_words(dotted.rsplit(".", 1)[-1]) if dotted else []


def steps_through_a_scaler(call: ast.Call) -> bool:
    """``loss_scaler(loss, optimizer, clip_grad=...)``: calling a loss scaler object with
    the optimizer (timm's ``NativeScaler``, copied by MAE, DeiT, BEiT...) runs the
    backward pass and the optimizer's step."""
    words = vocab.name_words(last_part(dotted_name(call.func) or ""))
    if words[-1:] != ["scaler"]:
        return False
    given = [*call.args, *(k.value for k in call.keywords)]
    return any(vocab.names_optimizer(dotted_name(v) or "") for v in given)
