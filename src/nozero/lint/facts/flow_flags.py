"""Sources of finiteness facts: what an expression says about finiteness.

``flag_of`` turns a test (``isnan(loss)``, ``g != g``, ``found_inf``, a flag or a
same-file helper's return) into a ``Flag``; this is where a new source is read.
One part of ``flows.Flows``, which mixes it in.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Callable

from nozero.lint import vocab
from nozero.lint.facts import sources
from nozero.lint.facts.flow_helpers import (
    _base_name,
    _fill_truth,
    _item_key,
    _names,
    _optimizer_report,
    _short,
    _zero_or_one,
)
from nozero.lint.facts.flow_types import Flag, Route, _Unit
from nozero.lint.facts.scopes import (
    FunctionNode,
    is_inf,
    parameter_names,
    self_comparable,
    source_segment,
)
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.scaling import SKIP_REPORTS
from nozero.lint.tables.propagation import SCALAR_READS
from nozero.lint.tables.sources import COMPARISON_CALLS


class FlagsPart:
    """Reading a finiteness fact, with its route and polarity, from an expression."""

    # ---- what an expression says about finiteness --------------------------------
    def flag_of(self, unit: _Unit, expr: ast.expr, extra: set[str] | None = None) -> Flag | None:
        extra = extra or set()
        if isinstance(expr, ast.Name | ast.Attribute):
            key = dotted_name(expr)
            if key and key in unit.env:
                return unit.env[key]
            if isinstance(expr, ast.Attribute) and expr.attr in sources.BAD_FLAG_NAMES:
                scaler = unit.scaling or expr.attr in SKIP_REPORTS or _optimizer_report(expr)
                route = Route(expr.lineno, _short(self.text, expr), None, scaler, by_name=True)
                return route, True
            if isinstance(expr, ast.Attribute) and expr.attr in ("any", "all"):
                return self.flag_of(unit, expr.value, extra)
            return None
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not | ast.Invert):
            found = self.flag_of(unit, expr.operand, extra)
            return (found[0], not found[1]) if found else None
        if isinstance(expr, ast.BoolOp) or (
            isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitAnd | ast.BitOr)
        ):
            parts = expr.values if isinstance(expr, ast.BoolOp) else [expr.left, expr.right]
            both = isinstance(expr.op, ast.And | ast.BitAnd)
            if both and any(self._against_a_random_draw(unit, part) for part in parts):
                return None  # a sampler's acceptance test rejects a non-finite proposal
            flags = [f for f in (self.flag_of(unit, part, extra) for part in parts) if f]
            pool = [f for f in flags if not f[0].weak] or flags
            if not pool:
                return None
            # ``not actor_overflow and critic_overflow`` holds only when the critic's
            # values are not finite: a part true on a non-finite value decides a conjunction
            return next((f for f in pool if f[1]), pool[0]) if both else pool[0]
        if isinstance(expr, ast.Compare):
            return self._compare(unit, expr, extra)
        if isinstance(expr, ast.Call):
            return self._call_flag(unit, expr, extra)
        if isinstance(expr, ast.Subscript):
            entry = _item_key(expr)  # ``stats["nonfinite"]``, bound from a test
            if entry is not None and entry in unit.env:
                return unit.env[entry]
            return self.flag_of(unit, expr.value, extra)
        if isinstance(expr, ast.NamedExpr):
            return self.flag_of(unit, expr.value, extra)
        if isinstance(expr, ast.IfExp):
            truths = (_zero_or_one(expr.body), _zero_or_one(expr.orelse))
            if None not in truths and truths[0] != truths[1]:
                # ``1.0 if bad else 0.0``: the test's answer as a number (to all-reduce)
                found = self.flag_of(unit, expr.test, extra)
                return (found[0], found[1] == truths[0]) if found else None
            # ``isnan(x).any().item() if x.numel() > 1 else isnan(x).item()``: a test
            # either way (or a test one way and a constant the other)
            sides = [self.flag_of(unit, side, extra) for side in (expr.body, expr.orelse)]
            return next((f for f in sides if f and not f[0].weak), None) or next(
                (f for f in sides if f), None
            )
        if isinstance(expr, ast.GeneratorExp | ast.ListComp):
            return self.flag_of(unit, expr.elt, extra)
        if isinstance(expr, ast.List | ast.Tuple) and len(expr.elts) == 1:
            return self.flag_of(unit, expr.elts[0], extra)  # ``torch.tensor([found_inf])``
        return None

    def _against_a_random_draw(self, unit: _Unit, expr: ast.expr) -> bool:
        """``log_alpha > np.log(u)`` with ``u = rng.random(n)``, ``ratio > torch.rand(n)``:
        a comparison with a uniform random draw, in the expression or bound to a name."""
        if not isinstance(expr, ast.Compare) or not any(
            draw in self.text for draw in sources.RANDOM_DRAWS
        ):
            return False  # most files draw nothing: one text search answers
        sides = (expr.left, *expr.comparators)
        names = {n.id for side in sides for n in ast.walk(side) if isinstance(n, ast.Name)}
        return bool(names & self._drawn(unit)) or _draws(expr, self._called)

    def _drawn(self, unit: _Unit) -> set[str]:
        """The names the function binds to a uniform random draw (found once)."""
        key = id(unit.node)
        if key not in self._drawn_memo:
            self._drawn_memo[key] = {
                name
                for targets, value in self.facts.bindings(unit.node)
                if _draws(value, self._called)
                for name in targets
            }
        return self._drawn_memo[key]

    def _compare(self, unit: _Unit, expr: ast.Compare, extra: set[str]) -> Flag | None:
        left, op, right = expr.left, expr.ops[0], expr.comparators[0]
        if len(expr.ops) != 1:
            return None
        itself = self_comparable(left) and ast.dump(left) == ast.dump(right)
        if isinstance(op, ast.NotEq) and itself:
            if vocab.self_comparisons(source_segment(self.text, expr)) and self._signal(
                unit, left, extra
            ):
                return self._route(expr, f"{_short(self.text, left)} != itself"), True
            return None
        for side, other in ((left, right), (right, left)):
            if is_inf(side) and self._marked_with_inf(unit, other):
                return None  # ``grads_mag[i] = float("inf")`` ... ``== inf``: a marker read
            if is_inf(side) and isinstance(op, ast.Eq | ast.NotEq | ast.Is):
                route = self._route(expr, f"{_short(self.text, other)} == inf")
                if not self._signal(unit, other, extra):
                    route = dataclasses.replace(route, weak=True)
                return route, isinstance(op, ast.Eq | ast.Is)
        if (
            isinstance(op, ast.In | ast.NotIn)
            and isinstance(left, ast.Constant)
            and isinstance(left.value, bool)
        ):  # ``True in torch.isnan(p.grad)``: some element tests true
            found = self.flag_of(unit, right, extra)
            if found is None:
                return None
            holds = found[1] == left.value
            return found[0], holds if isinstance(op, ast.In) else not holds
        if isinstance(right, ast.Constant) and right.value is None:
            return None  # ``flag is None`` asks whether it was set, not what it holds
        found = self.flag_of(unit, left, extra)
        if found and isinstance(right, ast.Constant):
            truthy = bool(right.value)
            if isinstance(op, ast.Eq | ast.Is):
                return (found[0], found[1] == truthy)
            if isinstance(op, ast.NotEq | ast.IsNot):
                return found[0], found[1] != truthy
            # a count or a 0/1 flag against a threshold: ``found_inf.item() >= 1``
            # holds when the test was true, ``nan_count < 1`` when it was not
            threshold = right.value if isinstance(right.value, int | float) else None
            if threshold is None or isinstance(threshold, bool):
                return None
            if (isinstance(op, ast.Gt) and threshold >= 0) or (
                isinstance(op, ast.GtE) and threshold > 0
            ):
                return found
            if (isinstance(op, ast.Lt) and threshold > 0) or (
                isinstance(op, ast.LtE) and threshold >= 0
            ):
                return found[0], not found[1]
        return None

    def _unequal_to_itself(self, unit: _Unit, call: ast.Call, extra: set[str]) -> Flag | None:
        """``g.ne(g)``, ``torch.ne(g, g)``: true where ``g`` is NaN, as ``g != g`` is."""
        if len(call.args) == 2 and not call.keywords:
            left, right = call.args
        elif len(call.args) == 1 and isinstance(call.func, ast.Attribute):
            left, right = call.func.value, call.args[0]
        else:
            return None
        if not (self_comparable(left) and ast.dump(left) == ast.dump(right)):
            return None
        if not vocab.self_inequality_calls(source_segment(self.text, call)):
            return None
        if not self._signal(unit, left, extra):
            return None
        return self._route(call, f"{_short(self.text, left)} != itself"), True

    def limit_flag(self, unit: _Unit, test: ast.expr) -> Flag | None:
        """``loss < limit`` (alone, negated, or in a conjunction): true only for a finite
        value, since NaN fails every comparison. Read only as an ``if``'s own test."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            found = self.limit_flag(unit, test.operand)
            return (found[0], not found[1]) if found else None
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            parts = (self.limit_flag(unit, part) for part in test.values)
            return next((f for f in parts if f is not None and not f[1]), None)
        if not isinstance(test, ast.Compare) or len(test.ops) != 1:
            return None
        op = test.ops[0]
        if isinstance(op, ast.Lt | ast.LtE):
            value, limit = test.left, test.comparators[0]
        elif isinstance(op, ast.Gt | ast.GtE):
            value, limit = test.comparators[0], test.left
        else:
            return None
        if not (_is_limit(limit) and self._step_signal(unit, value)):
            return None
        origin = f"{_short(self.text, test)}, false for NaN"
        # a limit is the user's own test: no loss scaler compares the loss with one
        return Route(test.lineno, origin, None, False, implicit=True), False

    def _step_signal(self, unit: _Unit, value: ast.expr) -> bool:
        """This step's loss or gradient norm (``loss``, ``loss.item()``, ``grad_norm``)."""
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in SCALAR_READS
            and not value.args
        ):
            value = value.func.value
        name = dotted_name(value)
        return bool(name) and vocab.names_step_signal(last_part(name))

    def given_predicates(self, unit: _Unit) -> dict[tuple[str, str], Flag]:
        """(function, parameter) -> the finiteness test a call in this file passes as that
        parameter: ``train(..., reject=lambda l: not torch.isfinite(l))``,
        ``train(..., reject=has_nan)`` (a same-file helper, or a library predicate)."""
        given: dict[tuple[str, str], Flag] = {}
        for call in ast.walk(self.facts.tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            for fn in self.facts.functions_named(call.func.id):
                names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
                positional = zip(names, call.args, strict=False)
                passed = [*positional, *((k.arg, k.value) for k in call.keywords)]
                for param, value in passed:
                    found = self._predicate(unit, value)
                    if param and found is not None:
                        route = dataclasses.replace(
                            found[0], line=call.lineno, origin=found[0].origin
                        )
                        given[(fn.name, param)] = (route, found[1])
        return given

    def _predicate(self, unit: _Unit, value: ast.expr) -> Flag | None:
        """The finiteness test a function value makes of its argument, if it is one."""
        if isinstance(value, ast.Lambda):
            found = self.flag_of(unit, value.body, parameter_names(value))
        elif isinstance(value, ast.Name) and self.facts.functions_named(value.id):
            found = self._helper_returns(value.id).get(None)
        else:
            name = last_part(self.facts.qualified(value) or "")
            polarity = sources.PREDICATE_POLARITY.get(name)
            found = None if polarity is None else (self._route(value, f"{name}()"), polarity)
        return found if found is not None and not found[0].weak else None

    def _given_test(self, unit: _Unit, call: ast.Call, extra: set[str]) -> Flag | None:
        """``if reject(loss): continue`` where a call of this function passes a
        finiteness test as ``reject``."""
        fn = unit.node
        if not (isinstance(call.func, ast.Name) and isinstance(fn, FunctionNode)):
            return None
        found = self._given.get((fn.name, call.func.id))
        if found is None or not any(self._signal(unit, a, extra) for a in call.args):
            return None
        given_at = f"given {found[0].origin} at line {found[0].line}"
        origin = f"{_short(self.text, call)} ({given_at})"
        route = Route(call.lineno, origin, None, found[0].scaling)
        return route, found[1]

    def _call_flag(self, unit: _Unit, call: ast.Call, extra: set[str]) -> Flag | None:
        given = self._given_test(unit, call, extra) if self._given else None
        if given is not None:
            return given
        called = self._called(call)
        comparison = COMPARISON_CALLS.get(called or "")
        if comparison is ast.NotEq:
            found = self._unequal_to_itself(unit, call, extra)
            if found is not None:
                return found
        if comparison is not None and len(call.args) == 2 and not call.keywords:
            # ``tf.equal(has_non_finite, 1)``, ``torch.gt(nan_count, 0)``: a comparison
            left, right = call.args
            compare = ast.Compare(left=left, ops=[comparison()], comparators=[right])
            return self._compare(unit, ast.copy_location(compare, call), extra)
        if called in sources.PREDICATE_POLARITY:
            subject = self.facts.predicate_subject(call)
            if subject is None:
                return None
            origin = f"{called}({_short(self.text, subject)})"
            route = self._route(call, origin)
            if not self._signal(unit, subject, extra):
                route = dataclasses.replace(route, weak=True)
            return route, sources.PREDICATE_POLARITY[called]
        if called in sources.OVERFLOW_HELPERS:
            return Route(call.lineno, f"{called}()", None, unit.scaling), True
        if called in sources.FINITE_HELPERS and isinstance(call.func, ast.Attribute):
            return Route(call.lineno, f"{called}()", None, unit.scaling), False
        helper = self.facts.helper_name(call.func)
        returned = None
        if helper is not None:
            returned = self._helper_returns(helper).get(None)
            arguments = [*call.args, *(k.value for k in call.keywords)]
            if returned and (
                returned[0].scaling
                or any(self._signal(unit, a, extra) or _holds_training_state(a) for a in arguments)
                or not arguments
            ):
                first, line = returned[0], call.lineno
                route = Route(line, f"{helper}()", None, first.scaling, by_name=first.by_name)
                return route, returned[1]
        if called == "where" and len(call.args) == 3:  # ``where(found, ones, zeros)``
            truths = [_fill_truth(branch) for branch in call.args[1:]]
            found = self.flag_of(unit, call.args[0], extra)
            if found and None not in truths and truths[0] != truths[1]:
                return found[0], found[1] == truths[0]
        # a helper's name is read when its body is unknown, or tests as its name says
        known = helper is None or returned is not None
        polarity = vocab.nonfinite_name_polarity(called) if known else None
        if polarity is not None:  # ``has_nan_or_inf(grads)``, a helper from another file
            arguments = [*call.args, *(k.value for k in call.keywords)]
            route = self._route(call, f"{called}()")
            if not (
                vocab.is_signal_name(called) or any(self._signal(unit, a, extra) for a in arguments)
            ):
                route = dataclasses.replace(route, weak=True)
            return route, polarity
        if called in vocab.MAPPERS and len(call.args) >= 2:  # tree map of a test over signal
            mapped, trees = call.args[0], call.args[1:]
            if any(self._signal(unit, tree, extra) for tree in trees):
                if isinstance(mapped, ast.Lambda):
                    return self.flag_of(unit, mapped.body, extra | parameter_names(mapped))
                name = last_part(self.facts.qualified(mapped) or "")
                if name in sources.PREDICATE_POLARITY:
                    origin = f"{name}({_short(self.text, trees[0])})"
                    return self._route(call, origin), sources.PREDICATE_POLARITY[name]
        if called == "logical_not" and call.args:
            found = self.flag_of(unit, call.args[0], extra)
            return (found[0], not found[1]) if found else None
        if called in sources.FLAG_REDUCTIONS or called in vocab.PREDICATES:
            receiver = [call.func.value] if isinstance(call.func, ast.Attribute) else []
            for arg in [*receiver, *call.args, *(k.value for k in call.keywords)]:
                found = self.flag_of(unit, arg, extra)
                if found:
                    return found
        return None

    def _route(self, node: ast.expr, origin: str) -> Route:
        return Route(node.lineno, origin, None, False)

    def _helper_returns(self, name: str) -> dict[int | None, Flag]:
        """What a same-file function returns as flags (by tuple position, None: whole),
        reading its parameters as training signal."""
        if name in self._helper_memo:
            return self._helper_memo[name]
        imported = self.facts.imported.get(name)
        if imported is not None:  # a helper of another module: what its summary says
            tested = Route(0, f"{name}()", None, imported.scaling)
            self._helper_memo[name] = {None: (tested, imported.polarity)} if imported.tests else {}
            return self._helper_memo[name]
        self._helper_memo[name] = {}
        found: dict[int | None, Flag] = {}
        collecting, self._collect = self._collect, True
        try:
            for fn in self.facts.functions_named(name):
                unit = _Unit(
                    fn, functools.partial(self.facts.parameter_scope, fn), {}, self._scaler_near(fn)
                )
                self._block(unit, fn.body, 0, None)
                for position, (route, polarity) in unit.returns.items():
                    # a flag handed back by code where a scaler is at work is the scaler's
                    scaling = route.scaling or unit.scaling
                    found[position] = (dataclasses.replace(route, scaling=scaling), polarity)
        finally:
            self._collect = collecting
        self._helper_memo[name] = found
        return found

    def _signal(self, unit: _Unit, expr: ast.expr, extra: set[str]) -> bool:
        if extra and _names(expr) & extra:
            return True
        return self.facts.is_signal(expr, unit.scope)

    def _called(self, call: ast.Call) -> str:
        return self.facts.called(call.func)

    def _from_apex(self, func: ast.expr) -> bool:
        """Is ``func`` apex's (``amp.scale_loss`` with ``from apex import amp``)?"""
        return (self.facts.qualified(func) or "").startswith("apex.")

    def _marked_with_inf(self, unit: _Unit, value: ast.expr) -> bool:
        """Does the function itself set ``value`` (or what it indexes) to infinity? Then
        ``value == inf`` reads a marker it wrote (tokens left out of a search), not a
        non-finite result."""
        base = _base_name(value)
        if base is None or not isinstance(unit.node, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        return any(
            isinstance(node, ast.Assign)
            and is_inf(node.value)
            and any(_base_name(t) == base for t in node.targets)
            for node in self.facts.nodes(unit.node)
        )


def _holds_training_state(node: ast.expr) -> bool:
    return vocab.holds_training_state(dotted_name(node) or "")


def _is_limit(node: ast.expr) -> bool:
    """A positive number, or a name that holds a limit (``self.hparams.loss_upper_lim``)."""
    if isinstance(node, ast.Constant):
        return (
            isinstance(node.value, int | float)
            and not isinstance(node.value, bool)
            and (node.value > 0)
        )
    name = dotted_name(node)
    return bool(name) and vocab.names_limit(last_part(name))


def _draws(node: ast.AST, called: Callable[[ast.Call], str]) -> bool:
    return any(
        isinstance(n, ast.Call) and called(n) in sources.RANDOM_DRAWS for n in ast.walk(node)
    )
