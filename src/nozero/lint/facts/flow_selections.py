"""Reactions inside one statement: selects, dropped samples, replaced values.

``where(isfinite(x), x, old)`` keeps old state, ``x[isfinite(x)]`` drops samples,
``nan_to_num`` replaces; these are found in a statement's own expressions rather
than in a branch. One part of ``flows.Flows``, which mixes it in.
"""

from __future__ import annotations

import ast

from nozero.lint import vocab
from nozero.lint.facts.flow_helpers import (
    _DETACHING,
    _IDENTIFIER,
    _mentions_finfo,
    _names,
    _negative,
    _none,
    _passes_through,
    _short,
    _statement_expressions,
    _strong,
)
from nozero.lint.facts.flow_types import Flag, Route, _Unit
from nozero.lint.facts.scopes import FunctionNode, bound_names, parameter_names
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.scaling import scaler_call
from nozero.lint.tables.propagation import GATHERING_CALLS, LOSS_REDUCTIONS, SELECT_CALLS
from nozero.lint.tables.reactions import HELPER_ZEROING
from nozero.lint.tables.sources import SCALER_TYPES


class SelectionsPart:
    """Reactions read from a statement's expressions."""

    # ---- selections, dropped samples, inside one statement ------------------------
    def _expressions(self, unit: _Unit, stmt: ast.stmt, in_bad_branch: bool = False) -> None:
        """Selects that keep old state and boolean indexing that drops samples, anywhere
        in the statement's own expressions (nested blocks are read as statements). In a
        branch taken on a non-finite value, the branch's first reaction is the site's one
        finding: the samples it drops are not reported again statement by statement."""
        extra: set[str] = set()
        subscript = isinstance(stmt, ast.Assign | ast.AnnAssign) and isinstance(
            stmt.value, ast.Subscript
        )
        if subscript and not in_bad_branch and (unit.trains or self._hands_back(unit, stmt)):
            self._drop(unit, stmt, stmt.value, extra)  # ``losses = losses[finite]``
        for node in _statement_expressions(stmt):
            if isinstance(node, ast.Call):
                called = self._called(node)
                if called in vocab.MAPPERS and node.args:
                    if any(self._signal(unit, a, extra) for a in node.args[1:]):
                        for arg in node.args[:1]:
                            if isinstance(arg, ast.Lambda):
                                extra |= parameter_names(arg)
                self._select(unit, stmt, node, called, extra)
                if scaler_call(node, ("step",)):
                    owner = dotted_name(node.func.value)  # type: ignore[attr-defined]
                    route = Route(node.lineno, f"{owner}.step()", None, True)
                    self._add(unit, "scaler_step", stmt, route)
                if called == "filter" and len(node.args) == 2:
                    self._filtered(unit, stmt, node, extra)
                if called in GATHERING_CALLS and node.args:
                    self._comprehended(unit, stmt, node.args[0], extra)
                if called in SCALER_TYPES and not _turned_off(node):
                    # ``GradScaler(enabled=use_amp)``: built here, wherever it steps
                    route = Route(node.lineno, f"{called}()", None, True)
                    self._add(unit, "scaler_built", stmt, route)
                if called == vocab.APEX_SCALE_LOSS and self._from_apex(node.func):
                    # the patched ``optimizer.step`` skips the step when this overflows
                    shown = dotted_name(node.func) or vocab.APEX_SCALE_LOSS
                    route = Route(node.lineno, f"{shown}()", None, True)
                    self._add(unit, "apex_scale", stmt, route)
                if called in vocab.MASKED_FILL and len(node.args) >= 2:
                    found = self.flag_of(unit, node.args[-2], extra)
                    if (
                        found
                        and self._sentinel(unit, node.args[-1])
                        and self._fills_what_it_tested(unit, node, found[0], extra)
                    ):
                        self._add(unit, "sentinel", stmt, found[0])
                if vocab.is_loss_name(called) or _parent_forward(node):
                    # ``F.mse_loss(pred[ok], y[ok])``, a loss class's ``super().forward(...)``
                    for subject in node.args[:2]:
                        self._drop(unit, stmt, subject, extra, strict=True)
                if called in LOSS_REDUCTIONS:
                    receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
                    for subject in [*receiver, *node.args[:1]]:
                        self._drop(unit, stmt, subject, extra)
                    if called in vocab.NAN_REDUCTIONS:
                        self._nan_reduction(unit, stmt, node, [*receiver, *node.args[:1]])
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                # ``bad * err + (~bad) * norm`` with ``err = tensor(-1.0)``
                for one, other in ((node.left, node.right), (node.right, node.left)):
                    found = self.flag_of(unit, one, extra)
                    if found and found[1] and self._sentinel(unit, other):
                        self._add(unit, "sentinel", stmt, found[0])
            elif isinstance(node, ast.IfExp):
                found = _strong(self.flag_of(unit, node.test, extra))
                branches = (node.body, node.orelse)
                if found and _passes_through(found, node.test, node.body, node.orelse):
                    continue
                if found and _read_names(node.body) | _read_names(node.orelse) <= _read_names(
                    node.test
                ):
                    continue  # ``finite.index(False) if False in finite else len(finite)``
                # a constant is NZ103's; None is no old state: it marks the value missing,
                # and anything that computes with it fails loudly
                if found and not any(self.facts.is_constant(b) or _none(b) for b in branches):
                    if self._signal(unit, node.body, extra) or self._signal(
                        unit, node.orelse, extra
                    ):
                        self._keep(unit, stmt, found)

    def _filtered(self, unit: _Unit, stmt: ast.stmt, call: ast.Call, extra: set[str]) -> None:
        """``sum(filter(self._valid_loss, terms))`` with a predicate true on finite values
        (a lambda, or a same-file helper returning ``not isnan(val)``): the non-finite
        loss terms are left out of what is summed."""
        predicate, items = call.args
        if not self._signal(unit, items, extra):
            return
        if isinstance(predicate, ast.Lambda):
            found = self.flag_of(unit, predicate.body, extra | parameter_names(predicate))
        else:
            helper = self.facts.helper_name(predicate)
            found = self._helper_returns(helper).get(None) if helper else None
        if found is not None and found[1] is False and not found[0].weak:
            origin = (
                _short(self.text, predicate.body)
                if isinstance(predicate, ast.Lambda)
                else f"{last_part(dotted_name(predicate) or '')}()"
            )
            route = Route(call.lineno, origin, None, False)
            self._add(unit, "drop_term", stmt, route)

    def _comprehended(self, unit: _Unit, stmt: ast.stmt, items: ast.expr, extra: set[str]) -> None:
        """``sum(l for l in losses if not isnan(l))``, ``torch.stack([...])``: loss terms
        kept only when finite are summed, so a non-finite one is left out."""
        if not isinstance(items, ast.ListComp | ast.GeneratorExp) or len(items.generators) != 1:
            return
        loop = items.generators[0]
        if not self._signal(unit, loop.iter, extra) or any(
            isinstance(n, ast.Call) and self._called(n) in _DETACHING for n in ast.walk(items.elt)
        ):
            return  # ``v.detach().item() for v in ...``: a number for the logs
        names = extra | {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        for condition in loop.ifs:
            found = self.flag_of(unit, condition, names)
            if found is not None and found[1] is False and not found[0].weak:
                self._add(unit, "drop_term", stmt, found[0])
                return

    def _nan_reduction(
        self, unit: _Unit, stmt: ast.stmt, call: ast.Call, subjects: list[ast.expr]
    ) -> None:
        """``loss = losses.nanmean()`` in code that trains (or a loss function handing the
        loss back): a NaN sample leaves the loss with no test at all. Only losses count:
        a NaN-ignoring metric (``errp = nanmean(pred / y)``) is the logs' business."""
        if (self.facts.qualified(call.func) or "").startswith("numpy."):
            return  # NumPy's arrays carry no gradient: an error measure, not the loss
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign | ast.AugAssign):
            targets = [stmt.target]
        hands_back = isinstance(stmt, ast.Assign | ast.AnnAssign) and self._hands_back(unit, stmt)
        if not (unit.trains or hands_back or isinstance(stmt, ast.Return)):
            return
        # what a loss function returns is its loss, whatever its terms are named
        # (``def depth_ranking_loss(...): return torch.nanmean(diff[...])``, or ``diff =
        # nanmean(...)`` and then ``return diff``)
        returns_loss = (
            (isinstance(stmt, ast.Return) or hands_back)
            and isinstance(unit.node, ast.FunctionDef | ast.AsyncFunctionDef)
            and self.facts.is_loss_function(unit.node)
        )
        named = [dotted_name(n) or "" for n in [*targets, *subjects]]
        if not returns_loss and not any(
            vocab.is_loss_name(name.rsplit(".", 1)[-1]) for name in named
        ):
            return
        # ``losses.nanmean()`` or ``jnp.nanmean(losses)``: a module is never signal
        if returns_loss or any(self.facts.is_signal(subject, unit.scope) for subject in subjects):
            shown = dotted_name(call.func) or self._called(call)
            self._add(unit, "nan_drop", stmt, Route(call.lineno, f"{shown}()", None, False))

    def _hands_back(self, unit: _Unit, stmt: ast.Assign | ast.AnnAssign) -> bool:
        """Does the function return what ``stmt`` binds (a loss for the caller's step),
        rather than keep it to itself (an analysis of finished trials)?"""
        if unit.returned is None:
            unit.returned = {
                name
                for node in self.facts.nodes(unit.node)
                if isinstance(node, ast.Return) and node.value is not None
                for name in _names(node.value)
            }
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return any(unit.returned & bound_names(target) for target in targets)

    def _fills_what_it_tested(
        self, unit: _Unit, call: ast.Call, route: Route, extra: set[str]
    ) -> bool:
        """``norm.masked_fill_(isinf(norm), -1)`` marks the tested value (or training
        signal); ``indices.masked_fill(scores == -inf, -1)`` marks other values where
        the scores were masked out, which hides nothing."""
        method = isinstance(call.func, ast.Attribute) and len(call.args) == 2
        filled = call.func.value if method else call.args[0]  # type: ignore[union-attr]
        return self._is_tested(filled, route, call.args[-2]) or self._signal(unit, filled, extra)

    def _is_tested(self, value: ast.expr, route: Route, test: ast.expr) -> bool:
        """Is ``value`` (a name) the value the test looked at?"""
        name = (dotted_name(value) or "").removeprefix("self.")
        return bool(name) and (name in _names(test) or vocab.has_word(route.origin, name))

    def _drop(
        self, unit: _Unit, stmt: ast.stmt, subject: ast.expr, extra: set[str], strict: bool = False
    ) -> None:
        """``losses[isfinite(losses)].mean()``, ``((pred[ok] - y[ok]) ** 2).mean()``: the
        non-finite samples leave the mean. Inside arithmetic or handed to a loss
        (``strict``), only a value the mask itself tested counts, and not a label
        (``criterion(pred[~isnan(y)], y[~isnan(y)])``: missing targets)."""
        for part in _arithmetic_parts(subject):
            if not (isinstance(part, ast.Subscript) and isinstance(part.ctx, ast.Load)):
                continue
            found = _strong(self.flag_of(unit, part.slice, extra))
            if not (found and not found[1] and self._signal(unit, part.value, extra)):
                continue
            if (strict or part is not subject) and not _tests_a_prediction(found[0], part.value):
                continue
            self._add(unit, "drop", stmt, found[0])
            return

    def _select(
        self, unit: _Unit, stmt: ast.stmt, call: ast.Call, called: str, extra: set[str]
    ) -> None:
        args = list(call.args)
        if (
            called == "partial"
            and len(args) >= 2
            and (last_part(self.facts.qualified(args[0]) or "") in SELECT_CALLS)
        ):
            found = self.flag_of(unit, args[1], extra)
            if found:
                self._keep(unit, stmt, found)
            return
        if called not in SELECT_CALLS or len(args) < 2:
            return
        found = self.flag_of(unit, args[0], extra) or self._limit_select(unit, args)
        if not found:
            return
        branches = args[1:3]
        if any(self.facts.is_nonfinite_constant(b) for b in branches):
            return  # ``where(isfinite(x), x, -inf)``: what stands in is not finite either
        if len(branches) == 2 and _passes_through(found, args[0], branches[0], branches[1]):
            return
        if found[0].weak and not any(
            self._signal(unit, b, extra) or self._finfo(unit, b) or self._sentinel(unit, b)
            for b in branches
        ):
            return
        if any(self._sentinel(unit, b) for b in branches):
            # a marker the overflow check reads, in place of the tested value (a weak
            # test's marker elsewhere, ``where(all(isnan(x)), -1, argmax(x))``, hides none)
            if not found[0].weak or any(self._is_tested(b, found[0], args[0]) for b in branches):
                self._add(unit, "sentinel", stmt, found[0])
            return
        if found[0].weak and any(self._finfo(unit, b) for b in branches):
            self._add(unit, "clamp", stmt, found[0])  # ``where(isinf(h).any(), max - 1000, max)``
            return
        if called in ("cond", "switch") and all(self._only_reports(b) for b in branches):
            return  # ``cond(any(~isfinite(g)), lambda: debug.print(...), lambda: None)``
        if called in ("cond", "switch") and any(self._recomputes(b) for b in branches):
            return  # the non-finite branch computes the value again: nothing is kept
        if called in ("cond", "switch") and any(self._zeroes(b) for b in branches):
            self._add(unit, "zero", stmt, found[0])
            return
        if not found[0].weak and any(self._named_fill(unit, b) for b in branches):
            self._add(unit, "replace", stmt, found[0])  # ``where(isnan(g), zeros, g)``
            return
        if any(self.facts.is_constant(b) for b in branches):
            # A plain constant fill is NZ103's concern, but NZ103 cannot follow a flag
            # handed back in a tuple (``grads, valid_step = self.scale_gradients(g)``),
            # nor loss scaling's own fills: those are the flow's to report.
            route = found[0]
            if route.weak:
                return
            if route.scaling or unit.scaling or _names(args[0]) & extra or route.in_tuple:
                kept = [b for b in branches if not self.facts.is_constant(b)]
                if route.scaling or unit.scaling or any(self._signal(unit, b, extra) for b in kept):
                    self._add(unit, "replace", stmt, route)
            return
        self._keep(unit, stmt, found)

    def _none_checked_after(self, unit: _Unit, key: str, line: int) -> bool:
        """Does the code below ``line`` ask whether ``key`` is None (and so go on
        without the value it was to hold)?"""
        return any(
            isinstance(node, ast.Compare)
            and node.lineno > line
            and isinstance(node.ops[0], ast.Is | ast.IsNot)
            and dotted_name(node.left) == key
            and _none(node.comparators[0])
            for node in self.facts.nodes(unit.node)
        )

    def _named_fill(self, unit: _Unit, value: ast.expr) -> bool:
        """A name the function binds only to constant fills (``zeros = zeros_like(g)``)."""
        if not isinstance(value, ast.Name) or not isinstance(unit.node, FunctionNode):
            return False
        bound = [v for names, v in self.facts.bindings(unit.node) if value.id in names]
        return bool(bound) and all(self.facts.is_finite_constant(v) for v in bound)

    def _limit_select(self, unit: _Unit, args: list[ast.expr]) -> Flag | None:
        """``where(loss < max_loss, new, old)``, ``cond(loss < limit, apply, keep, x)``:
        a select between two values named as they are (no arithmetic: a clip by hand
        scales one) on a loss below a limit, which NaN fails. A select of the loss or
        the limit itself is a clamp, not a kept state."""
        if len(args) < 3 or not all(isinstance(b, ast.Name | ast.Attribute) for b in args[1:3]):
            return None
        found = self.limit_flag(unit, args[0])
        compared = {
            ast.dump(n) for n in ast.walk(args[0]) if isinstance(n, ast.Name | ast.Attribute)
        }
        if found is None or any(ast.dump(b) in compared for b in args[1:3]):
            return None
        # a loss, not a norm: a select on a norm below its limit is a clip by hand
        # (``where(grad_norm < max_norm, g, clipped)``), whatever its branches are named
        losses = [n for n in ast.walk(args[0]) if isinstance(n, ast.Name | ast.Attribute)]
        if not any(vocab.is_loss_name(last_part(dotted_name(n) or "")) for n in losses):
            return None
        return found

    def _keep(self, unit: _Unit, stmt: ast.stmt, found: Flag) -> None:
        route = found[0]
        if not (route.scaling or unit.scaling) and self._recorded(unit, route):
            return
        if any(r.kind == "keep" and r.route == route for r in self._reactions.values()):
            return  # params and opt_state kept on one flag: one site, one finding
        self._add(unit, "keep", stmt, route)

    def _recorded(self, unit: _Unit, route: Route) -> bool:
        """Is the flag kept for a raise: returned, stored, passed on (not just logged),
        or raised on in this function?"""
        if unit.node is self.facts.tree or not isinstance(unit.node, ast.AST):
            return False
        names = {route.flag} if route.flag else set()
        if not names:
            return False
        for node in self.facts.nodes(unit.node):
            if isinstance(node, ast.If | ast.Assert) and names & _names(node.test):
                body = node.body if isinstance(node, ast.If) else []
                if isinstance(node, ast.Assert) or any(isinstance(s, ast.Raise) for s in body):
                    return True
        return self.facts.records_names(unit.node, names, unit.scope)

    def _only_reports(self, branch: ast.expr) -> bool:
        """A cond branch that does nothing but print or log (or nothing at all)."""
        if not isinstance(branch, ast.Lambda):
            return False
        body = branch.body
        if isinstance(body, ast.Constant) and body.value is None:
            return True
        return isinstance(body, ast.Call) and self._called(body) in vocab.OBSERVING_CALLS

    def _recomputes(self, branch: ast.expr) -> bool:
        """A cond branch that computes gradients anew (``jax.value_and_grad(f)(p)``)."""
        return isinstance(branch, ast.Lambda) and any(
            isinstance(n, ast.Call) and self._called(n) in vocab.GRAD_TRANSFORMS
            for n in ast.walk(branch.body)
        )

    def _zeroes(self, branch: ast.expr) -> bool:
        """A cond branch that returns zeros (a lambda or a same-file function)."""
        bodies: list[ast.expr] = []
        if isinstance(branch, ast.Lambda):
            bodies.append(branch.body)
        elif isinstance(branch, ast.Name):
            for fn in self.facts.functions_named(branch.id):
                bodies += [
                    n.value
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Return) and n.value is not None
                ]
        for body in bodies:
            for node in ast.walk(body):
                if isinstance(node, ast.Call) and self._called(node) == "zeros_like":
                    return True
                if isinstance(node, ast.Name | ast.Attribute) and (
                    last_part(self.facts.qualified(node) or "") == "zeros_like"
                ):
                    return True
        return False

    def _helper_zeroes(self, name: str) -> bool:
        """Does a same-file function clear the gradients (``zero_grad``, ``p.grad = None``)?"""
        for fn in self.facts.functions_named(name):
            for node in self.facts.nodes(fn):
                if isinstance(node, ast.Call) and self._called(node) in HELPER_ZEROING:
                    return True
                if (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
                    and _none(node.value)
                ):
                    return True
        return False

    def _finfo(self, unit: _Unit, node: ast.expr) -> bool:
        """A bound of the floating-point range, or a name bound to one in the function."""
        if _mentions_finfo(node):
            return True
        if isinstance(unit.node, ast.FunctionDef):
            names = _names(node)
            return any(
                names & bound and _mentions_finfo(value)
                for bound, value in self.facts.bindings(unit.node)
            )
        return False

    def _sentinel(self, unit: _Unit, node: ast.expr) -> bool:
        """A negative constant (``-1``), or a name bound to one (``torch.tensor(-1.0)``)."""
        if _negative(node):
            return True
        if isinstance(node, ast.Name) and isinstance(unit.node, ast.FunctionDef):
            for names, value in self.facts.bindings(unit.node):
                if node.id in names and isinstance(value, ast.Call) and value.args:
                    return _negative(value.args[0])
        return False


def _turned_off(call: ast.Call) -> bool:
    """``GradScaler(enabled=False)``: a scaler that scales nothing."""
    return any(
        k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
        for k in call.keywords
    )


def _read_names(node: ast.expr) -> set[str]:
    """The plain names whose values ``node`` reads (not the functions it calls)."""
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in called}


def _arithmetic_parts(node: ast.expr) -> list[ast.expr]:
    """``node`` and, through arithmetic, its operands (``(a[m] - b[m]) ** 2``: the two
    subscripts among them)."""
    parts = [node]
    for part in parts:
        if isinstance(part, ast.BinOp):
            parts += [part.left, part.right]
        elif isinstance(part, ast.UnaryOp):
            parts.append(part.operand)
    return parts


def _parent_forward(call: ast.Call) -> bool:
    """``super().forward(...)``: a loss class handing its inputs to the loss it extends."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "forward"
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _tests_a_prediction(route: Route, value: ast.expr) -> bool:
    """Did the mask's test look at ``value`` itself, and is ``value`` no label (``y_true``,
    ``target``)?"""
    name = dotted_name(value) or ""
    tested = set(_IDENTIFIER.findall(route.origin)) | route.looked_at
    words = vocab.name_words(name.rsplit(".", 1)[-1])
    return name in tested and not vocab.is_label_name(name) and "true" not in words
