"""NZ1xx: replacing non-finite training signal with numbers."""

from __future__ import annotations

import ast

import libcst as cst

from nozero.lint import vocab
from nozero.lint.imports import last_part
from nozero.lint.rules.base import Context, Example, Rule, walk
from nozero.lint.tables.reactions import RECORDING_CALLS

# Gradient hooks: functions that apply another function to each gradient.
_HOOKS = frozenset(
    {
        "register_hook",
        "register_full_backward_hook",
        "register_backward_hook",
        "register_post_accumulate_grad_hook",
    }
)


def is_finite_constant(node: cst.BaseExpression, ctx: Context) -> bool:
    """A literal number or a constant fill (zeros, ones): a finite stand-in, which hides
    the NaN or Inf it replaces (``jnp.inf`` in place of NaN hides nothing)."""
    return ctx.facts.is_finite_constant(ctx.facts.parse_expression(ctx.code(node))[0])


def is_nonfinite_constant(node: cst.BaseExpression | None, ctx: Context) -> bool:
    return node is not None and ctx.facts.is_nonfinite_constant(
        ctx.facts.parse_expression(ctx.code(node))[0]
    )


def _report(ctx: Context, node: cst.CSTNode, rule: Rule, detail: str = "") -> None:
    """Report ``node`` unless it is a 0/0 guard: it runs only when there is nothing to
    average, or it clears a value just masked (the NaN sits where the mask is zero). A
    real NaN elsewhere still shows."""
    if not (
        _guards_an_empty_reduction(node, ctx)
        or _clears_masked_positions(node, ctx)
        or _cleaned_for_the_record(ctx)
    ):
        ctx.report(node, rule, detail)


def _cleaned_for_the_record(ctx: Context) -> bool:
    """Is the node an argument of a call that only records a value (``tf.summary.
    histogram(name, mask_nans(g))``, ``writer.add_scalar(...)``, ``logger.info(...)``)?
    What is cleaned there is a copy for people to look at; training keeps the value."""
    for ancestor in reversed(ctx.ancestors):
        if isinstance(ancestor, cst.BaseStatement | cst.BaseSmallStatement):
            return False
        if isinstance(ancestor, cst.Call) and _records(ancestor, ctx):
            return True
    return False


# Modules whose ``log`` is the logarithm, not a logger's.
_MATH_MODULES = frozenset({"torch", "numpy", "jax", "math", "tensorflow", "scipy", "mlx"})


def _records(call: cst.Call, ctx: Context) -> bool:
    called = ctx.called(call)
    if called not in RECORDING_CALLS:
        return False
    root = (ctx.qualified(call.func) or "").split(".", 1)[0]
    return called != "log" or root not in _MATH_MODULES  # ``torch.log(p)``: arithmetic


def _clears_masked_positions(node: cst.CSTNode, ctx: Context) -> bool:
    """Is what ``node`` cleans a value multiplied by a mask just before (``loss = loss *
    mask`` then ``loss[loss != loss] = 0``)? The NaN of a masked-out zero target
    (``0 * inf``) sits where the mask is zero: clearing it finishes the masking."""
    names = _cleaned_names(node, ctx)
    line = ctx.positions[node].start.line + ctx.line_offset
    return bool(names) and all(ctx.facts.masked_before(ctx.scope_key, n, line) for n in names)


def _cleaned_names(node: cst.CSTNode, ctx: Context) -> list[str]:
    """The plain names ``node`` cleans: the assignment's target for ``x = f(x)`` and
    ``x[bad] = 0``, else none."""
    statement = next(
        (a for a in reversed([*ctx.ancestors, node]) if isinstance(a, cst.Assign)), None
    )
    if statement is None:
        return []
    names = []
    for target in statement.targets:
        inner = target.target
        if isinstance(inner, cst.Subscript):
            inner = inner.value
        if not isinstance(inner, cst.Name):
            return []
        names.append(inner.value)
    return names


# What counts elements (``mask.sum()``, ``len(x)``, ``x.shape[0]``, ``n_valid``).
_COUNTING_CALLS = frozenset({"numel", "nelement", "len", "count_nonzero", "sum", "size", "nnz"})
_COUNT_WORDS = frozenset({"count", "num", "n", "numel", "total", "size", "length"})


def _guards_an_empty_reduction(node: cst.CSTNode, ctx: Context) -> bool:
    """Is ``node`` in the body of an ``if`` that tests for no elements
    (``if data_masked.numel() == 0:``, ``if not mask.any():``, ``if n_valid == 0:``)?"""
    path = [*ctx.ancestors, node]
    for index in range(len(path) - 2, -1, -1):
        ancestor = path[index]
        if isinstance(ancestor, cst.FunctionDef | cst.Lambda):
            return False
        if isinstance(ancestor, cst.If) and path[index + 1] is ancestor.body:
            test, _ = ctx.facts.parse_expression(ctx.code(ancestor.test))
            if _tests_for_no_elements(test, ctx):
                return True
    return False


def _tests_for_no_elements(test: ast.expr, ctx: Context) -> bool:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        operand = test.operand
        return _counts(operand, ctx) or (
            isinstance(operand, ast.Call) and ctx.facts.called(operand.func) == "any"
        )
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, left, right = test.ops[0], test.left, test.comparators[0]
        for counted, bound in ((left, right), (right, left)):
            if (
                isinstance(bound, ast.Constant)
                and type(bound.value) is int
                and _counts(counted, ctx)
            ):
                zero = isinstance(op, ast.Eq | ast.LtE) and bound.value == 0
                return zero or (isinstance(op, ast.Lt) and bound.value == 1 and counted is left)
    return False


def _counts(expr: ast.expr, ctx: Context) -> bool:
    if isinstance(expr, ast.Call):
        return ctx.facts.called(expr.func) in _COUNTING_CALLS
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape"
    if isinstance(expr, ast.Attribute):
        return expr.attr == "size"
    if isinstance(expr, ast.Name):
        return bool(_COUNT_WORDS.intersection(vocab.name_words(expr.id)))
    return False


def _argument(call: cst.Call, position: int, *keywords: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in keywords:
            return arg.value
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return positional[position] if len(positional) > position else None


def _holds_training_state(node: cst.BaseExpression, ctx: Context) -> bool:
    """A model, an optimizer or ``self`` handed to a helper that cleans what it holds."""
    dotted = ctx.qualified(node)
    return dotted is not None and vocab.holds_training_state(dotted)


def _sanitizer_helper_called(call: cst.Call, ctx: Context) -> str | None:
    """The same-file function ``call`` calls, if that function cleans its argument."""
    helper = ctx.helper_called(call)
    return helper if helper is not None and ctx.facts.is_sanitizer_helper(helper) else None


def _is_sanitizer_value(node: cst.BaseExpression, ctx: Context) -> bool:
    """``jnp.nan_to_num`` as a value, ``partial(jnp.nan_to_num, ...)``, a lambda that calls
    it, or a same-file helper that does."""
    if isinstance(node, cst.Name | cst.Attribute):
        name = node.value if isinstance(node, cst.Name) else node.attr.value
        if last_part(ctx.qualified(node)) in vocab.SANITIZERS:
            return True
        if not ctx.facts.defines_function(name) and vocab.names_sanitizer(
            last_part(ctx.qualified(node))
        ):
            return True  # ``p.register_hook(nan_to_zero_hook)``, imported
        return (
            isinstance(node, cst.Name)
            and ctx.facts.defines_function(name)
            and ctx.facts.is_sanitizer_helper(name, ctx.scopes)
        )
    if isinstance(node, cst.Call) and ctx.called(node) == "partial" and node.args:
        return _is_sanitizer_value(node.args[0].value, ctx)
    if isinstance(node, cst.Lambda):
        return any(
            ctx.called(call) in vocab.SANITIZERS or _sanitizer_helper_called(call, ctx)
            for call in walk(node.body)
            if isinstance(call, cst.Call)
        )
    return False


def _in_mapped_lambda(ctx: Context) -> bool:
    """Is the current node inside a lambda passed to a tree map or a gradient hook?"""
    for index in range(len(ctx.ancestors) - 1, 1, -1):
        if isinstance(ctx.ancestors[index], cst.Lambda):
            arg, call = ctx.ancestors[index - 1], ctx.ancestors[index - 2]
            return (
                isinstance(arg, cst.Arg)
                and isinstance(call, cst.Call)
                and ctx.called(call) in vocab.MAPPERS | _HOOKS
            )
    return False


class NanToNumOnSignal(Rule):
    code = "NZ101"
    VALID = [
        Example("""\
            import numpy as np
            features = np.nan_to_num(features)
            """),
        Example("""\
            import jax.numpy as jnp
            val_loss = jnp.nan_to_num(val_loss)
            """),
        Example("""\
            import numpy as np
            # np.nan_to_num(grads) would hide the NaN
            x = 'nan_to_num(grads)'
            """),
        Example("""\
            import torch
            def plot(curve):
                return torch.nan_to_num(curve)
            """),
        Example("""\
            import torch
            def check_ddp_consistency(module):
                for name, param in module.named_parameters():
                    param = param.detach()
                    param = torch.nan_to_num(param)
                    other = param.clone()
                    torch.distributed.broadcast(other, src=0)
                    assert (param == other).all(), name
            """),
    ]
    INVALID = [
        Example(
            """\
            import jax.numpy as jnp
            grads = jnp.nan_to_num(grads)
            """,
            line=2,
        ),
        Example(
            """\
            import torch
            for p in model.parameters():
                torch.nan_to_num_(p.grad)
            """,
            line=3,
        ),
        Example(
            """\
            for p in model.parameters():
                p.grad.nan_to_num_(nan=0.0)
            """,
            line=2,
        ),
        Example(
            """\
            import torch
            torch.nan_to_num(loss, out=loss)
            """,
            line=2,
        ),
        Example(
            """\
            from torch import nan_to_num as scrub
            loss = scrub(loss)
            """,
            line=2,
        ),
        Example(
            """\
            import jax
            import jax.numpy as xp
            def step(p, b):
                d = jax.grad(f)(p, b)
                return xp.nan_to_num(d)
            """,
            line=5,
        ),
        Example(
            """\
            import numpy as np
            def clean(x):
                return np.nan_to_num(x)
            def step(grads):
                return clean(grads)
            """,
            line=5,
        ),
        Example(
            """\
            import torch
            def zero_nan_grads(model):
                for p in model.parameters():
                    p.grad[torch.isnan(p.grad)] = 0.0
            def train_step(model, loss, optimizer):
                loss.backward()
                zero_nan_grads(model)
                optimizer.step()
            """,
            line=7,
        ),
    ]

    def visit_Call(self, node: cst.Call, ctx: Context) -> None:
        if _in_mapped_lambda(ctx):
            return  # ``tree.map(lambda g: nan_to_num(g), grads)`` is NZ102's finding
        helper = _sanitizer_helper_called(node, ctx)
        if helper is not None:
            cleaned = ctx.facts.sanitized_parameters(helper)
            positional = [a.value for a in node.args if a.keyword is None and not a.star]
            handed = [positional[i] for i, _ in cleaned if 0 <= i < len(positional)]
            names = {name for _, name in cleaned}
            handed += [a.value for a in node.args if a.keyword and a.keyword.value in names]
            # a model or an optimizer handed to a helper that cleans its gradients in
            # place; a function that trains is no such helper (its finding is inside it)
            held = ctx.facts.cleans_given_gradients(helper) and not (
                ctx.facts.steps_an_optimizer(helper)
            )
            if any(
                (ctx.is_signal(v) and not _detached(v, ctx))
                or (held and _holds_training_state(v, ctx))
                for v in handed
            ):
                _report(ctx, node, self, f"through {helper}()")
            return
        if ctx.called(node) not in vocab.SANITIZERS:
            self._named_sanitizer(node, ctx)
            return
        expr, _ = ctx.facts.parse_expression(ctx.code(node))
        if isinstance(expr, ast.Call) and ctx.facts.hides_nothing(expr):
            return
        subjects = [a.value for a in node.args if a.keyword is None][:1]
        subjects += [
            a.value for a in node.args if a.keyword and a.keyword.value in ("x", "input", "out")
        ]
        if isinstance(node.func, cst.Attribute):
            subjects.append(node.func.value)
        if any(ctx.is_signal(s) for s in subjects) and not (
            _only_checked(node, ctx) or _made_a_number(node, ctx)
        ):
            _report(ctx, node, self)

    def _named_sanitizer(self, node: cst.Call, ctx: Context) -> None:
        """``replace_nan(grad, 0)`` with ``replace_nan`` from another module: a helper
        named for cleaning non-finite values, given training signal, is read as one."""
        called = ctx.called(node)
        if (
            not called
            or called in vocab.TRIGGER_WORDS
            or ctx.facts.defines_function(called)
            or not vocab.names_sanitizer(called)
        ):
            return
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        if positional and ctx.is_signal(positional[0]):
            _report(ctx, node, self, f"through {called}(), named for it")


def _detached(node: cst.BaseExpression, ctx: Context) -> bool:
    """``scores.detach()``, ``lax.stop_gradient(x)``, ``x.detach().clone()``: a copy out
    of the graph. A helper that cleans it (for target assignment, say) leaves the value
    the loss is computed from as it was, NaN included."""
    while isinstance(node, cst.Call):
        if ctx.called(node) in vocab.NO_GRADIENT_CALLS:
            return True
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value in _COPIES):
            return False
        node = node.func.value
    return False


# Methods that copy what they are called on (``x.detach().clone()``).
_COPIES = frozenset({"clone", "float", "contiguous", "cpu", "to"})


def _is_plain_number(node: cst.BaseExpression, ctx: Context) -> bool:
    """``loss.item()``, ``float(loss)``: a Python number, through which no gradient flows."""
    if not isinstance(node, cst.Call):
        return False
    if isinstance(node.func, cst.Attribute):
        return node.func.attr.value in vocab.TO_NUMBER and not node.args
    return ctx.called(node) in vocab.TO_NUMBER


def _made_a_number(node: cst.Call, ctx: Context) -> bool:
    """Is what ``node`` gives turned into plain numbers on the spot
    (``gathered.nan_to_num(nan=inf).min().item()``, ``float(nan_to_num(loss))``)? A
    number for the logs, through which no gradient flows."""
    child: cst.CSTNode = node
    for parent in reversed(ctx.ancestors):
        if isinstance(parent, cst.Attribute) and parent.value is child:
            if parent.attr.value in vocab.TO_NUMBER:
                return True
        elif isinstance(parent, cst.Call) and any(arg is child for arg in parent.args):
            return ctx.called(parent) in vocab.TO_NUMBER  # ``float(...)``
        elif isinstance(parent, cst.BinaryOperation | cst.UnaryOperation):
            pass  # ``(chosen.nan_to_num(0) - rejected.nan_to_num(0)).item()``
        elif not (
            (isinstance(parent, cst.Call) and parent.func is child)  # a method's result
            or (isinstance(parent, cst.Arg) and parent.value is child)
        ):
            return False
        child = parent
    return False


def _assigned_names(node: cst.CSTNode, ctx: Context) -> list[str]:
    """The names ``node`` is assigned to as a whole value (``a = b = node``); empty when
    it is not, or when a target is not a plain name."""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    if not isinstance(parent, cst.Assign) or parent.value is not node:
        return []
    targets = [t.target for t in parent.targets]
    if not all(isinstance(t, cst.Name) for t in targets):
        return []
    return [t.value for t in targets]  # type: ignore[attr-defined]


def _only_checked(node: cst.Call, ctx: Context) -> bool:
    """``tensor = nan_to_num(tensor)`` in a function that only asserts on ``tensor``."""
    names = _assigned_names(node, ctx)
    return bool(names) and all(ctx.facts.only_checks(ctx.scope_key, n) for n in names)


class NanToNumMapped(Rule):
    code = "NZ102"
    VALID = [
        Example("""\
            import jax, jax.numpy as jnp
            batch = jax.tree.map(jnp.nan_to_num, batch)
            """),
        Example("""\
            import jax
            import jax.numpy as jnp
            grads = jax.tree.map(jnp.sqrt, grads)
            """),
        Example("""\
            import numpy as np
            columns = list(map(np.nan_to_num, columns))
            """),
    ]
    INVALID = [
        Example(
            """\
            import jax, jax.numpy as jnp
            grads = jax.tree.map(jnp.nan_to_num, grads)
            """,
            line=2,
        ),
        Example(
            """\
            import jax
            import jax.numpy as jnp
            updates = jax.tree_util.tree_map(lambda u: jnp.nan_to_num(u, nan=0.0), updates)
            """,
            line=3,
        ),
        Example(
            """\
            import torch
            for p in model.parameters():
                p.register_hook(torch.nan_to_num)
            """,
            line=3,
        ),
        Example(
            """\
            import functools, torch
            h = w.register_hook(functools.partial(torch.nan_to_num, nan=0.0))
            """,
            line=2,
        ),
    ]

    def visit_Call(self, node: cst.Call, ctx: Context) -> None:
        called = ctx.called(node)
        if called not in vocab.MAPPERS | _HOOKS or not node.args:
            return
        if not _is_sanitizer_value(node.args[0].value, ctx):
            return
        if called in _HOOKS or any(ctx.is_signal(a.value) for a in node.args[1:]):
            _report(ctx, node, self)


class WhereSubstitutes(Rule):
    code = "NZ103"
    VALID = [
        Example("""\
            import jax.numpy as jnp
            logits = jnp.where(mask, logits, -1e9)
            """),
        Example("""\
            import jax.numpy as jnp
            x = jnp.where(jnp.isnan(features), 0.0, features)
            """),
        Example("""\
            import numpy as np
            acc = np.where(np.isnan(acc), 0.0, acc)
            """),
        Example("""\
            import math
            score = score if math.isfinite(score) else 0.0
            """),
        Example("""\
            import jax.numpy as jnp
            def armijo_error(loss, new_loss, slope, stepsize):
                diff = new_loss - (loss + 1e-4 * stepsize * slope)
                return jnp.maximum(jnp.where(jnp.isnan(diff), jnp.inf, diff), 0.0)
            """),
        Example("""\
            import jax.numpy as jnp
            finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in grads]))
            notfinite_count = jnp.where(finite, 0, notfinite_count + 1)
            """),
    ]
    INVALID = [
        Example(
            """\
            import jax.numpy as jnp
            grads = jnp.where(jnp.isnan(grads), 0.0, grads)
            """,
            line=2,
        ),
        Example(
            """\
            import torch
            loss = torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss))
            """,
            line=2,
        ),
        Example(
            """\
            import tensorflow as tf
            grads = tape.gradient(loss, model.trainable_variables)
            grads = [tf.where(tf.math.is_nan(g), tf.zeros_like(g), g) for g in grads]
            """,
            line=3,
        ),
        Example(
            """\
            import jax.numpy as xp
            updates = xp.where(updates != updates, 0, updates)
            """,
            line=2,
        ),
        Example(
            """\
            import math
            loss = loss if math.isfinite(loss) else 0.0
            """,
            line=2,
        ),
    ]

    def visit_IfExp(self, node: cst.IfExp, ctx: Context) -> None:
        """``loss if math.isfinite(loss) else 0.0``; a number for the logs
        (``total += loss.item() if not isnan(loss) else 0``) carries no gradient."""
        branches = (node.body, node.orelse)
        if (
            any(is_finite_constant(b, ctx) for b in branches)
            and not all(is_finite_constant(b, ctx) for b in branches)  # ``1.0 if bad else 0.0``
            and not any(_is_plain_number(b, ctx) for b in branches)
            and ctx.is_nonfinite_test(node.test)
        ):
            _report(ctx, node, self, "a conditional expression picks a constant")

    def visit_Call(self, node: cst.Call, ctx: Context) -> None:
        if ctx.called(node) != "where" or ctx.facts.mentions_scaling(ctx.scope_key):
            return  # a select inside loss scaling is the opt-in rule's (NZ406)
        if _counts_into(node, ctx):
            return  # ``notfinite_count = where(isfinite, 0, count + 1)``: bookkeeping
        condition = _argument(node, 0, "condition")
        branches = [_argument(node, 1, "x"), _argument(node, 2, "y")]
        if condition is None or None in branches:
            return
        if any(_increments(b) for b in branches if b):
            return  # ``retries.assign(where(any_nan, retries + 1, 0))``: a count of failures
        if any(is_finite_constant(b, ctx) for b in branches if b) and (
            ctx.is_nonfinite_test(condition)
        ):
            _report(ctx, node, self, "where(...) picks a constant")


def _increments(node: cst.BaseExpression) -> bool:
    """``count + 1``: a count going up, not a value being replaced."""
    return (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Add)
        and isinstance(node.right, cst.Integer)
    )


def _counts_into(node: cst.CSTNode, ctx: Context) -> bool:
    """Is ``node`` the value of an assignment to a count or size (``bad_steps = ...``)?"""
    names = _assigned_names(node, ctx)
    return bool(names) and all(vocab.is_measure_name(n) for n in names)


class MaskedFillNonFinite(Rule):
    code = "NZ104"
    VALID = [
        Example("""\
            scores = scores.masked_fill(~attention_mask, float('-inf'))
            """),
        Example("""\
            import torch
            x = x.masked_fill(torch.isnan(x), 0.0)
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            grad = grad.masked_fill(torch.isnan(grad), 0.0)
            """,
            line=2,
        ),
        Example(
            """\
            import torch
            loss.masked_fill_(~torch.isfinite(loss), 0)
            """,
            line=2,
        ),
        Example(
            """\
            import torch
            grad = torch.masked_fill(grad, torch.isinf(grad), 0.0)
            """,
            line=2,
        ),
    ]

    def visit_Call(self, node: cst.Call, ctx: Context) -> None:
        if ctx.called(node) not in vocab.MASKED_FILL:
            return
        positional = [a.value for a in node.args if a.keyword is None]
        mask = _argument(node, 1 if len(positional) >= 3 else 0, "mask")
        value = _argument(node, 2 if len(positional) >= 3 else 1, "value")
        if is_nonfinite_constant(value, ctx):
            return  # ``masked_fill(isnan(x), float("-inf"))``: still not finite
        # the tensor filled: ``x.masked_fill(mask, v)`` or ``torch.masked_fill(x, mask, v)``;
        # a target filled where the prediction is NaN hides nothing (the prediction's own
        # fill is the finding)
        if len(positional) >= 3:
            filled: cst.BaseExpression | None = positional[0]
        else:
            filled = node.func.value if isinstance(node.func, cst.Attribute) else None
        if isinstance(filled, cst.Name) and vocab.is_label_name(filled.value):
            return
        if mask is not None and ctx.is_nonfinite_test(mask):
            _report(ctx, node, self)


class MaskedAssignment(Rule):
    code = "NZ105"
    VALID = [
        Example("""\
            import numpy as np
            features[np.isnan(features)] = 0.0
            """),
        Example("""\
            x[mask] = 0
            """),
        Example("""\
            import jax.numpy as jnp
            embeddings = embeddings.at[jnp.isnan(embeddings)].set(0)
            """),
        Example("""\
            import torch
            def forward(self, g, features):
                norm = torch.pow(g.in_degrees().float(), -0.5)
                norm[torch.isinf(norm)] = 0
                return features * norm.unsqueeze(1)
            """),
        Example("""\
            import numpy as np
            def score(loss_terms, points, log_prior):
                finite = np.isfinite(log_prior)
                loss_terms[finite] = evaluate(points[finite])
                return loss_terms
            """),
        Example("""\
            import torch
            def accept(walkers, proposal, log_ratio, u):
                ok = (log_ratio > u) & ~torch.isnan(log_ratio)
                ok &= torch.isfinite(proposal).all(-1)
                walkers[ok] = proposal[ok]
                return walkers
            """),
    ]
    INVALID = [
        Example(
            """\
            import numpy as np
            grad[np.isnan(grad)] = 0
            """,
            line=2,
        ),
        Example(
            """\
            grads[grads != grads] = 0
            """,
            line=1,
        ),
        Example(
            """\
            import torch
            p.grad[~torch.isfinite(p.grad)] = 0.0
            """,
            line=2,
        ),
        Example(
            """\
            import jax.numpy as jnp
            updates = updates.at[jnp.isnan(updates)].set(0.0)
            """,
            line=2,
        ),
    ]

    def visit_Assign(self, node: cst.Assign, ctx: Context) -> None:
        if is_nonfinite_constant(node.value, ctx):
            return  # ``x[isnan(x)] = -inf``: still not finite
        for target in node.targets:
            if isinstance(target.target, cst.Subscript) and self._masked(target.target, ctx):
                _report(ctx, node, self)
                return

    def visit_Call(self, node: cst.Call, ctx: Context) -> None:
        if (
            isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, cst.Subscript)
            and isinstance(node.func.value.value, cst.Attribute)
            and node.func.value.value.attr.value == "at"
            and self._masked(node.func.value, ctx)
            and not is_nonfinite_constant(_argument(node, 0, "values"), ctx)
        ):
            _report(ctx, node, self)

    @staticmethod
    def _masked(subscript: cst.Subscript, ctx: Context) -> bool:
        """Indexed by a non-finite test that selects the non-finite positions: a mask true
        only where values are finite (``x[isfinite(p)] = f(...)``, an MCMC acceptance
        ``accept & finite_prior``) writes finite positions and hides nothing."""
        return any(
            isinstance(element.slice, cst.Index)
            and ctx.is_nonfinite_test(element.slice.value)
            and not ctx.true_only_where_finite(element.slice.value)
            and not _rebound_as_no_test(element.slice.value, subscript, ctx)
            for element in subscript.slice
        )


def _rebound_as_no_test(mask: cst.BaseExpression, at: cst.CSTNode, ctx: Context) -> bool:
    """``nan_idx`` re-bound to a magnitude test before this use (``nan_idx = any(x.abs()
    > 1e6)``): here it selects large values, not non-finite ones."""
    if not isinstance(mask, cst.Name):
        return False
    line = ctx.positions[at].start.line + ctx.line_offset
    return ctx.facts.rebound_as_no_test(mask.value, ctx.scope_key, line)


RULES: list[type[Rule]] = [
    NanToNumOnSignal,
    NanToNumMapped,
    WhereSubstitutes,
    MaskedFillNonFinite,
    MaskedAssignment,
]
