"""Small syntactic helpers of the finiteness flow pass.

Pure functions of ``ast`` nodes (is this a step, a constant, a scaler's name?) that
need no file's facts; every part of the pass reads them, so they import none of it.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from collections.abc import Iterator

from nozero.lint import vocab
from nozero.lint.facts import sources
from nozero.lint.facts.flow_types import _BLOCKS, _DEFS, Flag, Route
from nozero.lint.facts.scope_ast import names_and_attributes
from nozero.lint.facts.scopes import FileFacts, source_segment
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.tables.propagation import JOINS
from nozero.lint.tables.reactions import (
    PARAMETER_SOURCES,
    REPORTING_CALLS,
    STOP_FLAG_WORDS,
    STOP_PART_WORDS,
)
from nozero.lint.tables.sources import LOSS_TERM_NAMES, SCALER_TYPES

# ---- small syntactic helpers --------------------------------------------------------
_TRAINING_WORDS = frozenset({"train", "step", "backward", "update", "updates", "optimizer"})


def _names_training(called: str) -> bool:
    """Is a call named for training (``train_step``, ``optimizer.step``, ``model.fit``)?
    ``fit`` counts as the first word only: ``curve_fit`` fits a curve, not a model."""
    words = vocab.name_words(called)
    return bool(_TRAINING_WORDS.intersection(words)) or words[:1] == ["fit"]


_NAMED_TRAINING = vocab.STEPPING_NAME_WORDS | {"loss"}
# Conversions that take a value off the autograd graph: what is summed after one
# (``avg_loss += float(loss) / steps``) is a number for the logs, not training signal.
_DETACHING = vocab.TO_NUMBER | {"detach"}


def _tests_a_loss(tested: set[str]) -> bool:
    """Does a test look at a loss and at no gradient? A scaler at work in the same code
    skips overflowing gradients; skipping a non-finite loss is the code's own doing."""
    last = {name.rsplit(".", 1)[-1] for name in tested}
    words = {w for name in last for w in vocab.name_words(name)}
    loss = any(vocab.is_loss_name(name) for name in last) or bool(last & LOSS_TERM_NAMES)
    return loss and not words & vocab.GRADIENT_WORDS


def _origin_names(route: Route) -> set[str]:
    """The names a flag's test looked at (``record_loss`` in ``isnan(record_loss)``)."""
    return set(_IDENTIFIER.findall(route.origin)) | route.looked_at if route.flag else set()


_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")


def _passes_through(found: Flag, test: ast.expr, if_true: ast.expr, if_false: ast.expr) -> bool:
    """Is the value picked on a non-finite test the tested value itself
    (``where(isfinite(t), clip(t, max=1.0), t)``)? The NaN or Inf goes on as it was:
    nothing is kept or hidden."""
    bad = if_true if found[1] else if_false
    name = dotted_name(bad)
    return name is not None and name.removeprefix("self.") in _names(test)


# Classes whose ``step`` is no optimizer step: a gradient clipper, a learning-rate
# scheduler, an average, a timer (their ``return`` skips their own work only).
_HELPER_CLASS_WORDS = frozenset(
    {"clip", "clipper", "clipping", "scheduler", "sched", "ema", "averager", "timer", "meter"}
)


# What steps or scales training when one of its methods is called (``optimizer.step()``).
_TRAINING_RECEIVERS = frozenset(
    {"optimizer", "optim", "opt", "scaler", "trainer", "model", "engine", "accelerator"}
)


def _trains_by_itself(called: str, func: ast.expr) -> bool:
    """A call that is training whatever its arguments: ``backward``, ``train_step``,
    ``fit``, or a step or update of an optimizer, a scaler, a model or an engine."""
    words = vocab.name_words(called)
    if {"train", "backward"}.intersection(words) or words[:1] == ["fit"]:
        return True
    receiver = dotted_name(func.value) if isinstance(func, ast.Attribute) else None
    owner = (receiver or "").rsplit(".", 1)[-1]
    return bool(_TRAINING_RECEIVERS.intersection(vocab.name_words(owner)))


def _optimizer_report(expr: ast.Attribute) -> bool:
    """``model.optimizer.overflow``: what an fp16 optimizer (DeepSpeed's, Megatron's)
    reports of the step its loss scaler skipped; reading it is the scaler's business."""
    owner = (dotted_name(expr.value) or "").rsplit(".", 1)[-1]
    return expr.attr == "overflow" and "optimizer" in vocab.name_words(owner)


def _base_name(node: ast.expr) -> str | None:
    """``grads_mag`` for ``grads_mag[i]``, ``self.best`` for ``self.best``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return dotted_name(node)


def _constants(value: ast.expr) -> bool:
    """``False``, ``(False, None, None)``: a status, not a value computed here."""
    elements = value.elts if isinstance(value, ast.Tuple) else [value]
    return bool(elements) and all(isinstance(e, ast.Constant) for e in elements)


def _reports_status(value: ast.expr | None) -> bool:
    """``False`` or ``(False, step)``: a success flag handed to the caller."""
    elements = value.elts if isinstance(value, ast.Tuple) else [value]
    return any(map(_is_bool_constant, elements))


def _is_bool_constant(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, bool)


# Base classes of a model's layers (``nn.Module``, ``eqx.Module``, ``keras.layers.Layer``).
_MODEL_BASES = frozenset({"Module", "Layer", "Model", "LightningModule"})


def _is_model_class(cls: ast.ClassDef) -> bool:
    return any(last_part(dotted_name(base) or "") in _MODEL_BASES for base in cls.bases)


def _is_step(node: ast.AST) -> bool:
    """A function named for an optimizer step (``step``, ``optimizer_step``)."""
    name = getattr(node, "name", "")
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "step" in (
        vocab.name_words(name)
    )


def _line_range(node: ast.AST) -> tuple[int, int]:
    """First and last line of a definition, its decorators included."""
    lines = [d.lineno for d in getattr(node, "decorator_list", [])]
    first = min([*lines, node.lineno])  # type: ignore[attr-defined]
    return first, node.end_lineno or node.lineno  # type: ignore[attr-defined]


def _zero_or_one(value: ast.expr | None) -> bool | None:
    """The truth of a constant ``0``, ``1``, ``0.0``, ``1.0``, ``False`` or ``True``."""
    if isinstance(value, ast.Constant) and type(value.value) in (bool, int, float):
        return bool(value.value) if value.value in (0, 1) else None
    return None


def _fill_truth(value: ast.expr) -> bool | None:
    """True for ``ones_like(x)`` or ``1``, False for ``zeros_like(x)`` or ``0``."""
    if isinstance(value, ast.Call):
        called = last_part(dotted_name(value.func) or "")
        return {"ones_like": True, "ones": True, "zeros_like": False, "zeros": False}.get(called)
    return _zero_or_one(value)


def _constant_truth(value: ast.expr | None) -> bool | None:
    """The truth of a flag value written as a constant: ``True``, or a 0/1 flag made a
    tensor to be all-reduced (``torch.tensor([1.0], device=...)``); None for others."""
    if isinstance(value, ast.Call) and last_part(dotted_name(value.func) or "") in (
        "tensor",
        "as_tensor",
        "array",
    ):
        inner = value.args[0] if value.args else None
        if isinstance(inner, ast.List | ast.Tuple) and len(inner.elts) == 1:
            inner = inner.elts[0]
        return _zero_or_one(inner)
    if _is_bool_constant(value):
        return value.value  # type: ignore[union-attr]
    return None


def _counts_up(stmt: ast.stmt) -> bool:
    """``bad += 1``: a count of what the branch found, above 0 once it was found."""
    return (
        isinstance(stmt, ast.AugAssign)
        and isinstance(stmt.op, ast.Add)
        and isinstance(stmt.value, ast.Constant)
        and type(stmt.value.value) is int
        and stmt.value.value > 0
    )


def _added_to_itself(stmt: ast.stmt) -> ast.expr | None:
    """What ``total = total + value`` or ``total = cat((total, value))`` adds
    (``value``), else None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    total = dotted_name(stmt.targets[0])
    value = stmt.value
    if (
        isinstance(value, ast.Call)
        and last_part(dotted_name(value.func) or "") in JOINS
        and value.args
        and isinstance(value.args[0], ast.Tuple | ast.List)
    ):
        parts = value.args[0].elts
        others = [part for part in parts if dotted_name(part) != total]
        return others[0] if total and len(others) == 1 and len(parts) == 2 else None
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
        return None
    left, right = value.left, value.right
    if total and dotted_name(left) == total:
        return right
    if total and dotted_name(right) == total:
        return left
    return None


def _within(node: ast.AST, line: int) -> bool:
    first, last = _line_range(node)
    return first <= line <= last


def _any_within(sorted_lines: list[int], first: int, last: int) -> bool:
    at = bisect_left(sorted_lines, first)
    return at < len(sorted_lines) and sorted_lines[at] <= last


def _strong(found: Flag | None) -> Flag | None:
    """A flag about training signal (a test of an unknown value is weak)."""
    return found if found is not None and not found[0].weak else None


def _mentions_finfo(node: ast.expr) -> bool:
    """``torch.finfo(h.dtype).max - 1000``: the top of the floating-point range, where an
    fp16 clamp puts overflowed activations (``finfo.min`` alone stands in for a masked
    ``-inf``: masking, not clamping)."""
    return any(
        isinstance(n, ast.Attribute)
        and n.attr == "max"
        and isinstance(n.value, ast.Call)
        and getattr(n.value.func, "attr", getattr(n.value.func, "id", "")) == "finfo"
        for n in ast.walk(node)
    )


def _negative(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
    )


# Words without which no function holds a finiteness fact of its own.
# ... and the scalers' own names, so that the line building one is read (NZ406)
_SOURCE_WORDS = frozenset(vocab.PREDICATES | vocab.FLOW_WORDS | SCALER_TYPES)


def _child_statements(node: ast.AST):
    if not isinstance(node, _BLOCKS):
        return
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, name, ()):
            if isinstance(child, ast.excepthandler | ast.match_case):
                yield child
            elif isinstance(child, ast.stmt):
                yield child


def _statements(tree: ast.AST):
    """Every statement of the file, classes' and functions' included."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in _child_statements(node):
            yield child
            stack.append(child)


def _marks_a_skip(branch: list[ast.stmt]) -> ast.Assign | None:
    """``self.skip_next_update = True``: an attribute of its own named for skipping, set
    in the branch, asks the code that reads it (another method, a framework's loop) to
    skip the step. A local flag is left to the code below it or to the caller it is
    handed to; another object's switch (``self.critic.optimizer.skip_step = True``, an
    fp16 optimizer's) to that object."""
    for stmt in branch:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            for target in stmt.targets:
                key = _key(target) or ""
                if (
                    stmt.value.value is True
                    and key.count(".") == 1
                    and key.startswith("self.")
                    and "skip" in vocab.name_words(key.rsplit(".", 1)[-1])
                ):
                    return stmt
    return None


_NAMES = (ast.Name, ast.Attribute)


def _key(target: ast.expr) -> str | None:
    dotted = dotted_name(target)
    if dotted and (dotted.count(".") == 0 or dotted.startswith("self.")):
        return dotted
    return None


def _item_key(target: ast.expr) -> str | None:
    """``stats["nonfinite"]``, ``self.state["skip"]``: an entry of a dict under a constant
    key, as a flag's key (``stats[nonfinite]``); None for anything else."""
    if not isinstance(target, ast.Subscript):
        return None
    entry = target.slice
    if not (isinstance(entry, ast.Constant) and isinstance(entry.value, str)):
        return None
    base = _key(target.value)
    return f"{base}[{entry.value}]" if base and entry.value.isidentifier() else None


def _scaler_present(test: ast.expr) -> bool | None:
    """Does ``test`` hold when a loss scaler is in use (``self.scaler is not None``,
    ``if scaler:``, ``if args.fp16:``, ``if self.use_amp:``), or when none is (``scaler is
    None``, ``not self.scaler``)? None when it asks nothing of a scaler."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        # ``self.use_fp16 and scaler is not None``: the body needs every operand
        answers = {_scaler_present(value) for value in test.values} - {None}
        return answers.pop() if len(answers) == 1 else None
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _none(test.comparators[0]):
        present = isinstance(test.ops[0], ast.IsNot)
        test = test.left
    else:
        present = True
    words = vocab.name_words((dotted_name(test) or "").rsplit(".", 1)[-1])
    if not _AMP_SWITCH_WORDS.intersection(words):
        return None
    if words[:1] in (["no"], ["disable"], ["without"]):
        negated = not negated  # ``if not args.no_amp:``: mixed precision is on
    return present != negated


def _names_a_scaler(node: ast.AST) -> bool:
    """Is ``node`` a loss scaler object's name (``self.loss_scaler``, ``scaler``)?"""
    if isinstance(node, ast.Attribute):
        return "scaler" in vocab.name_words(node.attr)
    return isinstance(node, ast.Name) and "scaler" in vocab.name_words(node.id)


def _uses_switched_scaler(test: ast.expr, branch: list[ast.stmt]) -> bool:
    """``if grad_scaler is not None: state = grad_scaler._per_optimizer_states[...]``:
    the branch reads the scaler object its switch asked for."""
    asked = {dotted_name(n) for n in ast.walk(test) if _names_a_scaler(n)} - {None}
    return any(
        isinstance(n, ast.Attribute) and dotted_name(n.value) in asked for n in _walk(branch)
    )


def _walk(statements: list[ast.stmt]) -> list[ast.AST]:
    return [node for stmt in statements for node in ast.walk(stmt)]


def _outside_amp_switches(nodes: list[ast.AST]) -> Iterator[ast.AST]:
    """``nodes`` (a walk) but those on the scaler's side of an AMP switch (``if
    self.use_amp: scaler.step(opt) else: opt.step()``, ``scaler.get_scale() if scaler
    else 1.0``), the switch's own test, and type annotations (``scaler:
    Optional[GradScaler]`` names a type): a scaler used only there leaves the rest of the
    code, and a check in it, the code's own."""
    switched: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.arg) and node.annotation is not None:
            switched.update(id(n) for n in ast.walk(node.annotation))
        if isinstance(node, ast.If | ast.IfExp):
            present = _scaler_present(node.test)
            if present is not None:
                side = node.body if present else node.orelse
                for part in [node.test, *(side if isinstance(side, list) else [side])]:
                    switched.update(id(n) for n in ast.walk(part))
    return (n for n in nodes if id(n) not in switched)


# Words of a name that switches loss scaling on (``self.scaler``, ``use_amp``, ``fp16``).
_AMP_SWITCH_WORDS = frozenset({"scaler", "amp", "fp16"})


def _named_flag(key: str | None, line: int, origin: str, scaler: bool) -> Flag | None:
    """A flag named for what it holds, bound from an opaque call or lookup
    (``found_inf = ...``); its name says nothing of loss scaling: ``scaler`` does."""
    if not key:
        return None
    base = key.rsplit(".", 1)[-1]
    if base in sources.BAD_FLAG_NAMES:
        return Route(line, origin, base, scaler, by_name=True), True
    if base in sources.GOOD_FLAG_NAMES:
        return Route(line, origin, base, scaler, by_name=True), False
    polarity = vocab.nonfinite_name_polarity(base)  # ``found_inf_flag = ...``
    if polarity is not None:
        return Route(line, origin, base, scaler, by_name=True), polarity
    return None


_names = names_and_attributes


def _returns_as_usual(function: ast.AST, stmt: ast.stmt) -> bool:
    """Is ``stmt`` an early ``return`` handing back what the function's last statement
    does (``return {"loss": batch["loss"]}`` both times)? Leaving early then changes
    nothing the caller trains with: only the bookkeeping between is passed over."""
    body = getattr(function, "body", None)
    if not (isinstance(stmt, ast.Return) and stmt.value is not None and body):
        return False
    last = body[-1]
    return (
        isinstance(last, ast.Return)
        and last is not stmt
        and last.value is not None
        and ast.dump(last.value) == ast.dump(stmt.value)
    )


def _parameter_names(function: ast.AST) -> set[str]:
    """Names a loop over a model's parameters binds (``for p, saved in
    zip(model.parameters(), backup)``: ``p``; ``for name, p in named_parameters()``:
    both, the name harmlessly)."""
    found: set[str] = set()
    for node in ast.walk(function):
        if not isinstance(node, ast.For | ast.comprehension):
            continue
        sources = [
            call
            for call in ast.walk(node.iter)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in PARAMETER_SOURCES
        ]
        if not sources:
            continue
        target = node.target
        if isinstance(target, ast.Tuple) and isinstance(node.iter, ast.Call):
            # ``zip(model.parameters(), saved)``: only the element from the parameters
            args = node.iter.args
            if getattr(node.iter.func, "id", None) == "zip" and len(args) == len(target.elts):
                found.update(
                    elt.id
                    for elt, arg in zip(target.elts, args, strict=True)
                    if isinstance(elt, ast.Name) and any(s in ast.walk(arg) for s in sources)
                )
                continue
        found.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return found


def _only_reports(branch: list[ast.stmt]) -> bool:
    """Does ``branch`` do nothing but report (log, print, warn, a message built for it)?
    ``if isnan(loss): logger.error("nan loss")``: a diagnostic, not a reaction."""
    for stmt in branch:
        if isinstance(stmt, ast.Pass | ast.Continue):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a comment written as a string
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            word = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if word in REPORTING_CALLS:
                continue  # ``logging.getLogger(__name__).warning(...)`` too
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.JoinedStr | ast.Constant):
            continue  # ``msg = f"nan at {step}"``, then logged
        if isinstance(stmt, ast.If) and _only_reports(stmt.body) and _only_reports(stmt.orelse):
            continue
        return False
    return bool(branch)


def _sets_a_flag(branch: list[ast.stmt], before: ast.stmt) -> bool:
    """Does ``branch`` set a flag to a constant before ``before``: ``valid = False``, or
    a flag tensor filled in place (``self._found_overflow.fill_(1.0)``)?"""
    for stmt in branch[: branch.index(before)]:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            if isinstance(stmt.value.value, bool):
                return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            filled = isinstance(call.func, ast.Attribute) and call.func.attr == "fill_"
            if filled and len(call.args) == 1 and isinstance(call.args[0], ast.Constant):
                return True
    return False


def _none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _zero_arg(call: ast.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0


def _short(text: str, node: ast.expr) -> str:
    segment = " ".join(source_segment(text, node).split())
    return segment if len(segment) <= 40 else segment[:37] + "..."


def _caught(handler: ast.ExceptHandler, facts: FileFacts) -> set[str]:
    if handler.type is None:
        return set()
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {last_part(facts.qualified(t) or "") for t in types}


def _statement_expressions(stmt: ast.stmt):
    """The expressions a statement holds itself (not those of its nested blocks),
    lambdas included, outermost first."""
    roots: list[ast.AST] = []
    for name, value in ast.iter_fields(stmt):
        if name in ("body", "orelse", "finalbody", "handlers", "cases", "decorator_list"):
            continue
        if isinstance(value, ast.AST):
            roots.append(value)
        elif isinstance(value, list):
            roots.extend(v for v in value if isinstance(v, ast.AST))
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        if isinstance(node, _DEFS):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def asks_to_stop(key: str) -> bool:
    """Is ``key`` a flag that ends the run once set (``self.model.stop_training``,
    ``trainer.should_stop``)? Setting it on a non-finite value is a halt: no route. A
    flag that stops one step or a part of it (``stop_update``) is a skip."""
    words = set(vocab.name_words(key.rsplit(".", 1)[-1]))
    return bool(words & STOP_FLAG_WORDS) and not words & STOP_PART_WORDS
