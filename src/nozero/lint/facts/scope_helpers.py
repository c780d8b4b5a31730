"""Same-file helpers and constants: whether a helper of the file returns signal, tests,
sanitizes or raises; whether a constant is finite; masks and checks before a use; and the
queries rules make on a libcst node's code. A mixin of ``FileFacts``
(``nozero.lint.facts.scopes``), sharing its state through ``self``."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from nozero.lint import vocab
from nozero.lint.facts.scope_ast import (
    _CONVERSION_WORDS,
    _NONFINITE_WORDS,
    _SIGN_WORDS,
    FunctionNode,
    Scope,
    _is_mask,
    _names_in,
    _true_when_nonfinite,
    bound_names,
    cleaned_subjects,
    parameter_names,
    steps_an_optimizer,
    true_only_where_finite,
)
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.tables.propagation import VALUE_COPIES
from nozero.lint.tables.reactions import SANITIZED_KEYWORDS
from nozero.lint.tables.sources import PREDICATE_POLARITY

# NumPy's array types, as an ``isinstance`` test names them.
_NUMPY_ARRAY_TYPES = frozenset({"numpy.ndarray", "np.ndarray", "numpy.generic"})


class HelperFacts:
    """Same-file helpers and constants, the mixin part of ``FileFacts``."""

    # ---- same-file helpers ----------------------------------------------------------
    def _helper(self, kind: str, name: str, within: Sequence[int] = ()) -> bool:
        defs = self.functions_meant(name, within)
        key = (kind, name, *(fn.lineno for fn in defs))
        if key not in self._helper_memo:
            if name in self.imported:
                return self.imported[name].kinds[kind]
            self._helper_memo[key] = False  # recursion guard
            check = getattr(self, f"_{kind}")
            self._helper_memo[key] = any(check(fn) for fn in defs)
        return self._helper_memo[key]

    def _helper_returns_signal(self, name: str) -> bool:
        return self._helper("returns_signal", name)

    def is_predicate_helper(self, name: str) -> bool:
        return self._helper("tests_parameter", name)

    def is_sanitizer_helper(self, name: str, within: Sequence[int] = ()) -> bool:
        """A same-file function that replaces non-finite values of its argument (a helper
        named for plots or metrics is left alone, like the values it cleans). ``within``:
        the def lines around the reference, which a nested helper's name depends on."""
        return not vocab.is_metric_name(name) and self._helper("sanitizes_parameter", name, within)

    def cleans_given_gradients(self, name: str) -> bool:
        """Does the helper ``name`` clean, in place, the gradients of what it is given
        (``zero_nan_grads(model)``), rather than a value it hands back?"""
        return self._helper("cleans_given_gradients", name)

    def steps_an_optimizer(self, name: str) -> bool:
        """Does the same-file function ``name`` take an optimizer step (it trains)?"""
        return any(
            steps_an_optimizer(node)
            for fn in self._functions_by_name.get(name, [])
            for node in self.nodes(fn)
        )

    def is_raising_helper(self, name: str) -> bool:
        return self._helper("raises_somewhere", name)

    def _returns_signal(self, fn: FunctionNode) -> bool:
        scope = self.scope(fn.lineno)
        return any(
            isinstance(node, ast.Return)
            and node.value is not None
            and self.is_signal(node.value, scope)
            for node in self.nodes(fn)
        )

    def parameter_scope(self, fn: FunctionNode, only: str | None = None) -> Scope:
        """The function's scope, assuming its parameters (or just ``only``) are training
        signal, and so the tests of them it binds (``mask = isnan(terms)``) flags."""
        own = self.scope(fn.lineno)
        assumed = parameter_names(fn) if only is None else {only}
        # ``arr = jnp.asarray(leaf)``: a local copy is the parameter too
        signal = self._copied_names(fn, own.signal | assumed)
        scope = Scope(signal, own.grad_functions, set(own.flags))
        for names, value in self.bindings(fn):
            if not names <= scope.flags and (_true_when_nonfinite(value) or _finite_test(value)):
                if self.is_nonfinite_test(value, scope, self.source):
                    scope.flags |= names
        return scope

    def _copies(self, value: ast.expr, names: set[str]) -> bool:
        """Is ``value`` one of ``names`` as it is, or converted, cast or moved
        (``jnp.asarray(leaf)``, ``grad.float()``)?"""
        if isinstance(value, ast.Name):
            return value.id in names
        if not isinstance(value, ast.Call) or self.called(value.func) not in VALUE_COPIES:
            return False
        subjects = [*value.args[:1]]
        if isinstance(value.func, ast.Attribute):
            subjects.append(value.func.value)
        return any(isinstance(s, ast.Name) and s.id in names for s in subjects)

    def _tests_parameter(self, fn: FunctionNode) -> bool:
        candidates = self.flag_candidates(fn)
        returns = [
            node.value
            for node in self.nodes(fn)
            if isinstance(node, ast.Return)
            and isinstance(node.value, ast.expr)
            and self.may_be_test(node.value, candidates)
        ]
        if not returns:  # screened without computing the function's scope
            return False
        scope = self.parameter_scope(fn)
        return any(self.is_nonfinite_test(value, scope, self.source) for value in returns)

    def flag_candidates(self, fn: FunctionNode) -> set[str]:
        """Names ``fn`` binds to something that may be a finiteness test: a cheap,
        syntactic superset of its flags (no signal tracking)."""
        return _grown(self.bindings(fn), set(), self.may_be_test)

    def sanitized_parameters(self, name: str) -> list[tuple[int, str]]:
        """(position, name) of each parameter a same-file sanitizer cleans, so that a call
        counts only when it hands training signal to one of them."""
        if name in self.imported:
            return list(self.imported[name].cleans)
        if name in self._sanitized:
            return self._sanitized[name]
        self._sanitized[name] = []  # a helper calling itself, or two calling each other
        found: list[tuple[int, str]] = []
        for fn in self._functions_by_name.get(name, []):
            args = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
            offset = 1 if args[:1] in (["self"], ["cls"]) else 0
            for index, parameter in enumerate(args[offset:]):
                if self._sanitizes_parameter(fn, parameter):
                    found.append((index, parameter))
            found += [
                (-1, a.arg) for a in fn.args.kwonlyargs if self._sanitizes_parameter(fn, a.arg)
            ]
        self._sanitized[name] = found
        return found

    def _sanitizes_parameter(self, fn: FunctionNode, only: str | None = None) -> bool:
        calls = self._cleaning_calls(fn)
        if not calls:
            return False
        own = self.scope(fn.lineno)
        if self._cleans(calls, own, fn):
            # it cleans signal of its own: that statement is a finding, and so is a call
            # that hands it what it cleans (``finite_check(model.parameters())`` for a
            # helper zeroing ``p.grad`` for each ``p`` it is given)
            given = [only] if only is not None else sorted(parameter_names(fn))
            return any(self._cleans_from(fn, calls, own, name) for name in given)
        return self._cleans(calls, self.parameter_scope(fn, only), fn)

    def _copied_names(self, fn: FunctionNode, names: set[str]) -> set[str]:
        """``names`` and the locals of ``fn`` that copy them (``arr = jnp.asarray(leaf)``)."""
        return _grown(self.bindings(fn), names, self._copies)

    def _cleans_given_gradients(self, fn: FunctionNode) -> bool:
        calls = self._cleaning_calls(fn)
        own = self.scope(fn.lineno) if calls else None
        return (
            own is not None
            and self._cleans(calls, own, fn)
            and any(self._cleans_from(fn, calls, own, name) for name in sorted(parameter_names(fn)))
        )

    def _cleaning_calls(self, fn: FunctionNode) -> list[tuple[ast.Call | ast.Assign, str]]:
        """The statements of ``fn`` that may clean a value: sanitizer and masked-fill
        calls, selects, tree maps of a sanitizer, other cleaning helpers, assignments of
        a constant through an index."""
        calls = [
            (node, self.called(node.func)) for node in self.nodes(fn) if isinstance(node, ast.Call)
        ]
        # ``tree_map(np.nan_to_num, vals)``, ``tree_map(partial(jnp.nan_to_num, nan=0), v)``
        calls += [
            (c, "mapped")
            for c, n in calls
            if n in vocab.MAPPERS
            and len(c.args) >= 2
            and self._sanitizer_reference(c.args[0], (fn.lineno,))
        ]
        # another same-file sanitizer it hands its values to (``_jit_nan_to_num(vals)``)
        calls += [
            (c, "helper")
            for c, n in calls
            if (helper := self.helper_name(c.func))
            and helper != fn.name
            and self.sanitized_parameters(helper)
        ]
        numpy_only = self._numpy_only_spans(fn)
        calls = [
            (c, n)
            for c, n in calls
            if n in vocab.SANITIZERS | vocab.MASKED_FILL | {"where", "mapped", "helper"}
            and not any(first <= c.lineno <= last for first, last in numpy_only)
        ]
        calls += [
            (node, "[]=")  # ``x[torch.isnan(x)] = 0.0``
            for node in self.nodes(fn)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Subscript) for t in node.targets)
            and self.is_finite_constant(node.value)
        ]
        return calls

    def _numpy_only_spans(self, fn: FunctionNode) -> list[tuple[int, int]]:
        """The lines of ``fn``'s branches taken only for a NumPy array (``if isinstance(x,
        np.ndarray):``), as a helper serving several frameworks writes them: a NumPy array
        carries no gradient, so what such a branch cleans is no training signal."""
        spans = []
        for node in self.nodes(fn):
            if (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Call)
                and self.called(node.test.func) == "isinstance"
                and len(node.test.args) == 2
                and (self.qualified(node.test.args[1]) or "") in _NUMPY_ARRAY_TYPES
            ):
                spans.append((node.body[0].lineno, node.body[-1].end_lineno or node.lineno))
        return spans

    def _cleans_from(
        self,
        fn: FunctionNode,
        calls: list[tuple[ast.Call | ast.Assign, str]],
        own: Scope,
        parameter: str,
    ) -> bool:
        """Does one of ``calls`` clean the gradients of what ``parameter`` holds
        (``p.grad`` for each ``p`` in it), state the caller keeps, rather than a value the
        helper computes or returns?"""
        bindings = self.bindings(fn)
        derived = _grown(bindings, {parameter}, _hands_on)
        # a name also bound to a value made here (``x = x.clone()``) may hold a copy: what
        # is cleaned through it is not what the caller handed over
        derived -= {n for names, value in bindings if not _hands_on(value, derived) for n in names}
        return any(
            any(_gradient_of(subject, derived) for subject in cleaned_subjects(node))
            and self._cleans([(node, name)], own, fn)
            for node, name in calls
        )

    def _cleans(
        self, calls: list[tuple[ast.Call | ast.Assign, str]], scope: Scope, fn: FunctionNode
    ) -> bool:
        """Does one of ``calls`` (sanitizers, masked fills and assignments, selects) in
        ``fn`` replace non-finite values of ``scope``'s signal by finite ones?"""
        for node, name in calls:
            if isinstance(node, ast.Assign):
                masks = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
                if any(self.is_nonfinite_test(m, scope, self.source) for m in masks):
                    return True
                continue
            if name == "mapped" and any(self.is_signal(v, scope) for v in node.args[1:]):
                return True
            if name == "helper" and self.hands_to_sanitizer(node, scope):
                return True
            if name in vocab.SANITIZERS and self.hides_nothing(node):
                continue
            if name in vocab.SANITIZERS:
                subjects = [*node.args[:1]]
                subjects += [k.value for k in node.keywords if k.arg in SANITIZED_KEYWORDS]
                if isinstance(node.func, ast.Attribute):
                    subjects.append(node.func.value)
                if any(self.is_signal(s, scope) for s in subjects):
                    return True
            elif name in vocab.MASKED_FILL and node.args:
                mask = node.args[0 if len(node.args) < 3 else 1]
                if self.is_nonfinite_test(mask, scope, self.source):
                    return True
            elif name == "where" and len(node.args) >= 3:
                if any(self._finite_fill(b, fn) for b in node.args[1:3]) and (
                    self.is_nonfinite_test(node.args[0], scope, self.source)
                ):
                    return True
        return False

    def _finite_fill(self, value: ast.expr, fn: FunctionNode) -> bool:
        """A finite constant, written in place or bound once to a name in ``fn``
        (``zeros = tf.zeros_like(x)`` ... ``tf.where(ok, x, zeros)``)."""
        if isinstance(value, ast.Name):
            bound = [v for names, v in self.bindings(fn) if value.id in names]
            return len(bound) == 1 and self.is_finite_constant(bound[0])
        return self.is_finite_constant(value)

    def is_constant(self, node: ast.expr) -> bool:
        """A number, ``-1.0``, ``jnp.nan``, a constant fill (``zeros_like(x)``) or a
        conversion of a constant (``torch.tensor(0.0)``, ``float("nan")``; ``float(v)``
        converts a value and is no constant)."""
        if isinstance(node, ast.UnaryOp):
            node = node.operand
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int | float | complex) and not isinstance(
                node.value, bool
            )
        if isinstance(node, ast.Attribute):
            return node.attr in vocab.CONSTANT_NAMES
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            # ``value * ones_like(g)``: a fill with a number the caller chose
            sides = (node.left, node.right)
            return any(map(self._is_fill, sides)) and all(
                self._is_fill(side) or isinstance(side, ast.Name | ast.Constant) for side in sides
            )
        if not isinstance(node, ast.Call):
            return False
        name = self.called(node.func)
        if name in vocab.CONSTANT_CONVERSIONS:
            return bool(node.args) and all(
                self.is_constant(a) or (isinstance(a, ast.Constant) and isinstance(a.value, str))
                for a in node.args
            )
        return name in vocab.CONSTANT_FILLS

    def _is_fill(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Call) and self.called(node.func) in vocab.CONSTANT_FILLS

    def is_finite_constant(self, node: ast.expr) -> bool:
        """A constant that stands in for a value as a finite number (``0.0``,
        ``zeros_like(x)``): what hides a NaN or an Inf it replaces."""
        return self.is_constant(node) and not self.is_nonfinite_constant(node)

    def is_nonfinite_constant(self, node: ast.expr) -> bool:
        """``jnp.inf``, ``-math.inf``, ``float("nan")``, ``torch.tensor(float("-inf"))``,
        ``self.neg_inf``: put in place of NaN or Inf, it is still not finite (a rejected
        trial, a masked log-probability), so nothing is hidden."""
        if isinstance(node, ast.UnaryOp):
            node = node.operand
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            words = set(vocab.name_words(name.lower()))
            return bool(words & _NONFINITE_WORDS) and words <= _NONFINITE_WORDS | _SIGN_WORDS
        if not (isinstance(node, ast.Call) and node.args):
            return False
        called = self.called(node.func)
        if called == "float" and isinstance(node.args[0], ast.Constant):
            return str(node.args[0].value).lower().lstrip("+-") in ("nan", "inf", "infinity")
        if called in ("full", "full_like", "new_full"):
            return len(node.args) > 1 and self.is_nonfinite_constant(node.args[1])
        if _CONVERSION_WORDS.intersection(vocab.name_words(called)) or (
            called in vocab.CONSTANT_CONVERSIONS
        ):
            return self.is_nonfinite_constant(node.args[0])  # ``numpy_dtype(-np.inf)``
        return False

    def masked_before(self, key: int, name: str, line: int) -> bool:
        """Was ``name`` multiplied by a mask before ``line`` in the function on line
        ``key`` (``loss = loss * mask``, ``loss *= mask``)? Its NaN then sits where the
        mask is zero (``0 * inf`` of a masked-out target), and clearing it is masking."""
        entry = self._functions.get(key)
        if entry is None:
            return False
        for node in self.nodes(entry[0]):
            if getattr(node, "lineno", line) >= line:
                continue
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
                target, factors = node.target, [node.value]
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.BinOp)
                and isinstance(node.value.op, ast.Mult)
            ):
                target, factors = node.targets[0], [node.value.left, node.value.right]
            else:
                continue
            if (
                isinstance(target, ast.Name)
                and target.id == name
                and any(_is_mask(factor) for factor in factors)
            ):
                return True
        return False

    def only_checks(self, key: int, name: str) -> bool:
        """Does the function on line ``key`` assert on ``name`` while it neither hands
        ``name`` back nor trains? Cleaning a copy of the parameters before comparing it
        across ranks (a consistency check) hides nothing from training."""
        entry = self._functions.get(key)
        if entry is None:
            return False
        nodes = self.nodes(entry[0])
        asserted = any(isinstance(n, ast.Assert) and name in _names_in(n.test) for n in nodes)
        returned = any(
            isinstance(n, ast.Return) and n.value is not None and name in _names_in(n.value)
            for n in nodes
        )
        steps = any(
            isinstance(n, ast.Call)
            and self.called(n.func) in vocab.UPDATE_CALLS | vocab.TRAINING_CALLS
            for n in nodes
        )
        return asserted and not returned and not steps

    def _raises_somewhere(self, fn: FunctionNode) -> bool:
        """A raise on some path counts (a helper that re-raises when out of retries)."""
        return any(isinstance(node, ast.Raise) for node in self.nodes(fn))

    # ---- queries from rules, on the code of a libcst node ----------------------------
    def parse_expression(self, code: str) -> tuple[ast.expr, str]:
        """The ``ast`` of one expression's code, and the text positions refer to."""
        if code not in self._parsed:
            text = f"(\n{code}\n)"
            self._parsed[code] = (ast.parse(text, mode="eval").body, text)
        return self._parsed[code]

    def code_is_signal(self, code: str, key: int) -> bool:
        expr, _ = self.parse_expression(code)
        return self.is_signal(expr, self.scope(key))

    def code_is_nonfinite_test(self, code: str, key: int) -> bool:
        expr, text = self.parse_expression(code)
        return self.is_nonfinite_test(expr, self.scope(key), text)

    def code_true_only_where_finite(self, code: str, key: int) -> bool:
        """Is the mask ``code`` (in the function on line ``key``) true only at finite
        values? Its names are read through their one binding in that function."""
        expr, _ = self.parse_expression(code)
        entry = self._functions.get(key)
        values: dict[str, list[ast.expr | None]] = {}
        for node in self.nodes(entry[0] if entry else self.tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    plain = isinstance(target, ast.Name)
                    for name in bound_names(target):
                        values.setdefault(name, []).append(node.value if plain else None)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                if not isinstance(node.op, ast.BitAnd):  # ``accept &= ok`` only narrows
                    values.setdefault(node.target.id, []).append(None)
        return true_only_where_finite(
            expr, lambda name: v[0] if len(v := values.get(name, [])) == 1 else None
        )


# Calls that hand on what they are given (a list of it, its items, a filtered view):
# ``list(filter(keep, parameters))``, ``model.parameters()``, ``grads.values()``.
_PASSING_ON = frozenset(
    {"list", "tuple", "filter", "iter", "sorted", "reversed", "enumerate", "zip", "chain"}
)
_ACCESSORS = frozenset(
    {"parameters", "named_parameters", "values", "items", "children", "modules", "leaves"}
)


def _grown(
    bindings: list[tuple[set[str], ast.expr]],
    names: set[str],
    carries: Callable[[ast.expr, set[str]], bool],
) -> set[str]:
    """``names`` and every name bound to a value that ``carries`` one of them, followed
    through the bindings until nothing new is bound."""
    found = set(names)
    changed = True
    while changed:
        changed = False
        for bound, value in bindings:
            if not bound <= found and carries(value, found):
                found |= bound
                changed = True
    return found


def _hands_on(value: ast.expr, given: set[str]) -> bool:
    """Is ``value`` one of ``given``, part of one, or one's items, rather than something
    computed from it (``model(x)``, ``loss.mean()``)?"""
    if isinstance(value, ast.Name):
        return value.id in given
    if isinstance(value, ast.Attribute | ast.Subscript | ast.Starred):
        return _hands_on(value.value, given)
    if isinstance(value, ast.List | ast.Tuple | ast.Set):
        return any(_hands_on(element, given) for element in value.elts)
    if isinstance(value, ast.IfExp):
        return _hands_on(value.body, given) or _hands_on(value.orelse, given)
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in _ACCESSORS:
            return _hands_on(func.value, given)
        if getattr(func, "id", None) in _PASSING_ON or getattr(func, "attr", None) in _PASSING_ON:
            return any(_hands_on(argument, given) for argument in value.args)
    return False


def _gradient_of(subject: ast.expr, given: set[str]) -> bool:
    """Is ``subject`` a gradient held by one of ``given`` (``p.grad``, ``p.grad.data[m]``)?"""
    holds_gradient = False
    while isinstance(subject, ast.Attribute | ast.Subscript):
        if isinstance(subject, ast.Attribute) and subject.attr == "grad":
            holds_gradient = True
        subject = subject.value
    return holds_gradient and isinstance(subject, ast.Name) and subject.id in given


def _finite_test(value: ast.expr) -> bool:
    """``tf.is_finite(x)``, ``torch.isfinite(g)``: a mask true where values are finite,
    which a cleaning helper selects with (``where(ok, x, zeros)``)."""
    return (
        isinstance(value, ast.Call)
        and PREDICATE_POLARITY.get(last_part(dotted_name(value.func) or "")) is False
    )
