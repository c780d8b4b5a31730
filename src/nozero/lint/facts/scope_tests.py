"""Is an expression training signal, and is it a NaN/Inf test of signal: the questions
rules ask about one expression, and the guards around them (does the scope raise, or
record the failure for a later raise). A mixin of ``FileFacts``
(``nozero.lint.facts.scopes``), sharing its state through ``self``."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from nozero.lint import vocab
from nozero.lint.facts.scope_ast import (
    _TRAINING_NAME_WORDS,
    Scope,
    _asks_about,
    _Lens,
    _names_logits,
    _root_name,
    _updates_a_mapping,
    is_inf,
    parameter_names,
    self_comparable,
    source_segment,
    string_key,
)
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.tables.propagation import BOOLEAN_CALLS
from nozero.lint.tables.sources import INFINITY_TESTS

# Attributes that hold a tensor's gradient (torch's ``.grad``, Megatron's ``.main_grad``):
# the owner's name (``weight``, ``budget_weights``) says what the tensor is, not that the
# gradient is a setting; only a settings holder (``cfg.grad``) makes it one.
_GRADIENT_ATTRIBUTES = frozenset({"grad", "main_grad"})
_SETTINGS_HOLDERS = frozenset(
    {"config", "cfg", "conf", "args", "hparams", "opts", "options", "settings", "flags"}
)


class ExpressionFacts:
    """Expressions, finiteness tests and guards, the mixin part of ``FileFacts``."""

    # ---- expressions ----------------------------------------------------------------

    def _is_grad_transform(self, value: ast.expr, scope: Scope) -> bool:
        if isinstance(value, ast.Call):
            qualified = self.qualified(value.func) or ""
            if last_part(qualified) in vocab.GRAD_TRANSFORMS and not qualified.startswith("torch."):
                return True
            if last_part(qualified) == "partial" and value.args:
                return self._is_grad_transform(value.args[0], scope)
            return isinstance(value.func, ast.Name) and value.func.id in scope.grad_functions
        return isinstance(value, ast.Name) and value.id in scope.grad_functions

    def is_signal(self, expr: ast.expr, scope: Scope) -> bool:
        """Does ``expr`` carry training signal (by name, by origin or through a helper)?"""
        for node in self._signal_carriers(expr):
            if isinstance(node, ast.Name):
                if node.id in scope.signal or (
                    vocab.is_signal_name(node.id) and node.id not in scope.not_signal
                ):
                    return True
            elif isinstance(node, ast.Attribute):
                if dotted_name(node) in scope.signal:
                    return True  # ``self.grad_norm``, set from signal in this function
                chain = (dotted_name(node) or node.attr).split(".")
                if node.attr in vocab.AMBIGUOUS_SIGNAL_NAMES and node.attr in scope.not_signal:
                    continue  # ``self.g`` where no gradient is in sight, or used as a graph
                if node.attr in _GRADIENT_ATTRIBUTES and not any(
                    vocab.is_metric_name(part) or part in _SETTINGS_HOLDERS for part in chain
                ):
                    return True  # ``model.fc.weight.grad``: a tensor's gradient, whatever it is
                if vocab.is_signal_name(node.attr) and not any(
                    vocab.is_metric_name(part) or vocab.is_config_name(part) for part in chain
                ):
                    return True
                if node.attr == "state" and len(chain) > 1 and vocab.names_optimizer(chain[-2]):
                    return True  # ``self.optimizer.state``: the optimizer's moments
            elif isinstance(node, ast.Call) and self._call_returns_signal(node, scope):
                return True
            elif isinstance(node, ast.Subscript) and _keyed_signal(node):
                return True  # ``metrics["loss"]`` handed back by a JAX step: the loss itself
        return False

    def _signal_carriers(self, expr: ast.expr) -> Iterator[ast.AST]:
        """The nodes of ``expr`` through which signal can reach its value. A metric's result
        (``average_precision(predict(params, x), y)``, ``accuracy_score(...)``,
        ``metric.compute()``) is an observation derived from signal, not signal: the walk
        does not enter its arguments."""
        stack: list[ast.AST] = [expr]
        while stack:
            node = stack.pop()
            yield node
            if isinstance(node, ast.Call) and self.computes_metric(node):
                continue
            if _asks_about(node):
                continue  # ``input.shape[1]``: how big a value is, not the value
            if isinstance(node, ast.Call) and self.called(node.func) in vocab.NO_GRADIENT_CALLS:
                # ``lax.stop_gradient(x)``, ``x.detach()``: the name says nothing of the
                # value, which is what it is given
                receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
                stack.extend([*receiver, *node.args, *(k.value for k in node.keywords)])
                continue
            if isinstance(node, ast.Call) and _updates_a_mapping(node):
                # ``past_key_value.update(k, v)``: a cache's or a mapping's ``update``
                # says nothing of its result; an optimizer's is named for its receiver
                stack.extend([*ast.iter_child_nodes(node.func), *node.args])
                stack.extend(k.value for k in node.keywords)
                continue
            stack.extend(ast.iter_child_nodes(node))

    def computes_metric(self, call: ast.Call) -> bool:
        """A call to a metric (its name, or its receiver's, names a score, a precision,
        an accuracy...), unless it is also named for a loss."""
        func = call.func
        names = [self.called(func)]
        if isinstance(func, ast.Attribute):
            names.append(last_part(dotted_name(func.value) or ""))
        return any(
            name
            and vocab.is_metric_name(name)
            and not _TRAINING_NAME_WORDS & set(vocab.name_words(name))
            for name in names
        )

    def _call_returns_signal(self, call: ast.Call, scope: Scope) -> bool:
        if self._is_grad_transform(call.func, scope):
            return True
        qualified = self.qualified(call.func) or ""
        if last_part(qualified) in vocab.GRAD_CALLS or qualified == "torch.autograd.grad":
            return True
        helper = self.helper_name(call.func)
        return helper is not None and self._helper_returns_signal(helper)

    def is_nonfinite_test(self, expr: ast.expr, scope: Scope, text: str) -> bool:
        """Is ``expr`` a test of training signal for NaN/Inf (``isnan(loss)``, ``g != g``,
        a flag assigned from such a test, a same-file predicate helper)?

        ``text`` is the source ``expr`` was parsed from; a self-comparison only counts when
        its text reads ``x != x``, which keeps the textual pre-filter exact."""
        return self._test(expr, _Lens(lambda e: self.is_signal(e, scope), scope.flags, text))

    def rebound_as_no_test(self, name: str, key: int, line: int) -> bool:
        """Is ``name``, where it is read on ``line`` in the function on line ``key``,
        last bound (in a block that holds the read) to something that is no finiteness
        test: ``nan_idx = any(obs.abs() > 1e6)`` after an earlier ``nan_idx =
        any(~isfinite(obs))``? The scope's flags hold every name ever bound to a test."""
        entry = self._functions.get(key)
        root = entry[0] if entry else self.tree
        latest: ast.stmt | None = None
        for node in self.nodes(root):
            if (
                isinstance(node, ast.Assign)
                and node.lineno < line
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and (latest is None or node.lineno > latest.lineno)
            ):
                latest = node
        if latest is None or not self._holds_the_read(root, latest, line):
            return False
        return not self.is_nonfinite_test(latest.value, self.scope(key), self.source)

    def _holds_the_read(self, root: ast.AST, stmt: ast.stmt, line: int) -> bool:
        """Does the block ``stmt`` sits in also hold ``line`` after it (every path to the
        read passes through ``stmt``)?"""
        for node in [root, *self.nodes(root)]:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list) and any(s is stmt for s in block):
                    end = block[-1].end_lineno or block[-1].lineno
                    return stmt.lineno < line <= end
        return False

    def may_be_test(self, expr: ast.expr, flags: set[str]) -> bool:
        """The same question without signal tracking (any value counts): a cheap superset
        used to screen functions before their scope is computed."""
        return self._test(expr, _Lens(lambda e: True, flags, None))

    def _test(self, expr: ast.expr, lens: _Lens) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in lens.flags
        if isinstance(expr, ast.Compare):
            if (
                len(expr.ops) == 1
                and isinstance(expr.ops[0], ast.NotEq)
                and self_comparable(expr.left)
                and ast.dump(expr.left) == ast.dump(expr.comparators[0])
                and (lens.text is None or vocab.self_comparisons(source_segment(lens.text, expr)))
                and lens.signal(expr.left)
            ):
                return True
            if len(expr.ops) == 1 and isinstance(expr.ops[0], ast.Eq | ast.NotEq | ast.Is):
                left, right = expr.left, expr.comparators[0]
                for side, other in ((left, right), (right, left)):
                    if is_inf(side) and lens.signal(other):
                        return True  # ``g == float("inf")``, ``p.grad.abs() == math.inf``
            return any(self._test(e, lens) for e in (expr.left, *expr.comparators))
        if isinstance(expr, ast.Call):
            return self._test_call(expr, lens)
        if isinstance(expr, ast.BoolOp):
            return any(self._test(v, lens) for v in expr.values)
        if isinstance(expr, ast.UnaryOp):
            return self._test(expr.operand, lens)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitAnd | ast.BitOr | ast.BitXor):
            return any(self._test(e, lens) for e in (expr.left, expr.right))
        if isinstance(expr, ast.Attribute):  # ``jnp.isnan(g).any`` before it is called
            return self._test(expr.value, lens)
        if isinstance(expr, ast.GeneratorExp | ast.ListComp):
            return self._test(expr.elt, lens)
        return False

    def _test_call(self, call: ast.Call, lens: _Lens) -> bool:
        name = self.called(call.func)
        subject = self.predicate_subject(call)
        if subject is not None:
            if name in INFINITY_TESTS and _names_logits(subject):
                return False  # ``isinf(student_logits)``: where logits were masked to -inf
            return lens.signal(subject)
        helper = self.helper_name(call.func)
        if helper is not None and self.is_predicate_helper(helper):
            return any(lens.signal(a) for a in call.args)
        if any(self.is_predicate_reference(a) for a in call.args):  # tree_map(isfinite, g)
            return any(lens.signal(a) for a in call.args)
        if name in vocab.SELECTORS:
            return False
        receiver = [call.func.value] if isinstance(call.func, ast.Attribute) else []
        if name in BOOLEAN_CALLS:  # ``jnp.all(jnp.isfinite(g))``, ``isnan(g).any()``
            return any(
                self._test(e, lens)
                for e in (*receiver, *call.args, *(k.value for k in call.keywords))
            )
        # any other method keeps its receiver's meaning only: ``isnan(loss).item()``
        return any(self._test(e, lens) for e in receiver)

    def predicate_subject(self, call: ast.Call) -> ast.expr | None:
        """What ``isnan(x)`` / ``x.isnan()`` tests, or None when ``call`` is no such test."""
        name = self.called(call.func)
        if name not in vocab.PREDICATES:
            return None
        if call.args:
            return call.args[0]
        if call.keywords:
            return call.keywords[0].value
        return call.func.value if isinstance(call.func, ast.Attribute) else None

    def _sanitizer_reference(self, node: ast.expr, within: Sequence[int] = ()) -> bool:
        """``np.nan_to_num`` used as a value, bound with ``partial``, called on the
        parameter of a lambda (``lambda v: jnp.nan_to_num(v, nan=fill)``), or a same-file
        function that cleans what it is given (``tree_map(_sanitize, grads)``; ``within``:
        the def lines around the reference)."""
        if isinstance(node, ast.Call) and self.called(node.func) == "partial" and node.args:
            node = node.args[0]
        if isinstance(node, ast.Name) and node.id in self._functions_by_name:
            return self.is_sanitizer_helper(node.id, within)
        if isinstance(node, ast.Lambda) and isinstance(node.body, ast.Call):
            given = {a.arg for a in node.args.args}
            body = node.body
            return self.called(body.func) in vocab.SANITIZERS and any(
                isinstance(a, ast.Name) and a.id in given for a in body.args[:1]
            )
        return isinstance(node, ast.Name | ast.Attribute) and (
            last_part(self.qualified(node)) in vocab.SANITIZERS
        )

    def hands_to_sanitizer(self, call: ast.Call, scope: Scope) -> bool:
        """Does ``call`` hand training signal of ``scope`` to a parameter that the
        same-file sanitizer it calls cleans?"""
        helper = self.helper_name(call.func)
        cleaned = self.sanitized_parameters(helper) if helper else []
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        handed = [positional[i] for i, _ in cleaned if 0 <= i < len(positional)]
        names = {name for _, name in cleaned}
        handed += [k.value for k in call.keywords if k.arg in names]
        return any(self.is_signal(v, scope) for v in handed)

    def is_predicate_reference(self, node: ast.expr) -> bool:
        """``jnp.isfinite`` used as a value (not called)."""
        return isinstance(node, ast.Name | ast.Attribute) and (
            last_part(self.qualified(node)) in vocab.PREDICATES
        )

    # ---- guards: does the scope raise, or record the failure for a raise? -------------
    def _raises(self, root: ast.AST) -> bool:
        nodes = self.nodes(root) if isinstance(root, ast.Module) else ast.walk(root)
        for node in nodes:
            if isinstance(node, ast.Raise | ast.Assert):
                return True
            if isinstance(node, ast.Call):
                if last_part(self.qualified(node.func)) in vocab.RAISING_CALLS:
                    return True
                called = self.called(node.func)
                if self.defines_function(called) and self.is_raising_helper(called):
                    return True
        return False

    def _records(self, root: ast.AST, scope: Scope) -> bool:
        """Is a finiteness flag kept (returned, stored, passed on) rather than only used to
        pick between old and new values?"""
        return bool(scope.flags) and self.records_names(root, set(scope.flags), scope)

    def records_names(self, root: ast.AST, flags: set[str], scope: Scope) -> bool:
        """Is one of ``flags`` kept (returned, stored, passed on to anything but a log)
        rather than only used to pick between old and new values?"""
        kept = set(flags)
        # what goes into a record for the logs (``stats["step_rejected"] = reject``) is
        # reported, not kept for a raise
        for_logs: set[int] = set()
        for names, value in self.bindings(root):  # ``first_bad = where(ok, first_bad, step)``
            if names and all(map(vocab.is_log_record_name, names)):
                for_logs.add(id(value))
            elif self._mentions(value, kept, scope):
                kept |= {n for n in names if not vocab.is_signal_name(n)}
        for node in self.nodes(root):
            if id(node) in for_logs:
                continue
            if isinstance(node, ast.Return | ast.Yield) and node.value is not None:
                values: list[ast.expr] = [node.value]
            elif isinstance(node, ast.Assign) and not all(
                isinstance(t, ast.Name) for t in node.targets
            ):
                if all(vocab.is_log_record_name(_root_name(t)) for t in node.targets):
                    continue
                values = [node.value]
            elif isinstance(node, ast.Dict):
                values = [v for v in node.values if v is not None]
            elif isinstance(node, ast.Call) and last_part(
                self.qualified(node.func) or getattr(node.func, "attr", None)
            ) not in (vocab.SELECTORS | BOOLEAN_CALLS | vocab.OBSERVING_CALLS | {"partial"}):
                values = [*node.args, *(k.value for k in node.keywords)]
            else:
                continue
            if any(self._mentions(v, kept, scope) for v in values):
                return True
        return False

    def _branch_returns_signal(self, branch: ast.expr) -> bool:
        """A ``cond`` branch given as a same-file function that returns training signal
        (``def _skip(_): return params, opt_state``)."""
        helper = self.helper_name(branch)
        return helper is not None and self._helper_returns_signal(helper)

    def _mentions(self, expr: ast.expr, names: set[str], scope: Scope) -> bool:
        """Does ``expr`` carry one of ``names`` out, rather than only use it to choose
        between training-signal values (``where(ok, new, old)``)?"""
        if isinstance(expr, ast.Name):
            return expr.id in names
        if isinstance(expr, ast.Lambda):  # ``tree.map(lambda n, o: ...)``: leaves of signal
            inner = Scope(scope.signal | parameter_names(expr), scope.grad_functions, scope.flags)
            return self._mentions(expr.body, names, inner)
        if (  # ``partial(jnp.where, ok)``: a select waiting for its two values
            isinstance(expr, ast.Call)
            and expr.args
            and last_part(self.qualified(expr.func) or "") == "partial"
            and last_part(self.qualified(expr.args[0]) or "") in vocab.SELECTORS
        ):
            return False
        if isinstance(expr, ast.Call) and expr.args and self.called(expr.func) in vocab.SELECTORS:
            chosen = [*expr.args[1:], *(k.value for k in expr.keywords)]
            if any(self.is_signal(a, scope) or self._branch_returns_signal(a) for a in chosen):
                return any(self._mentions(a, names, scope) for a in chosen)
        return any(
            self._mentions(child, names, scope)
            for child in ast.iter_child_nodes(expr)
            if isinstance(child, ast.expr)
        )


def _keyed_signal(node: ast.Subscript) -> bool:
    """``metrics["loss"]``, ``logs["train/loss"]``, ``out["grad_norm"]``: an entry whose
    key names the loss or the gradients, whatever the record holding it is called."""
    key = string_key(node)
    name = key.replace("/", ".").rsplit(".", 1)[-1] if key else ""
    return name.isidentifier() and vocab.is_signal_name(name)
