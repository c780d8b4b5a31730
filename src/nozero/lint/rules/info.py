"""NZ5xx: informational, off by default."""

from __future__ import annotations

import libcst as cst

from nozero.lint import vocab
from nozero.lint.rules.base import Context, Example, Rule, is_literal, walk


def _modulo(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)


def _periodic(node: cst.CSTNode) -> bool:
    """``step % N == 0`` and ``not step % N``."""
    if isinstance(node, cst.UnaryOperation):
        return isinstance(node.operator, cst.Not) and _modulo(node.expression)
    if not (isinstance(node, cst.Comparison) and _modulo(node.left)):
        return False
    [*rest, last] = node.comparisons
    return not rest and isinstance(last.operator, cst.Equal) and is_literal(last.comparator, "0")


def _alternatives(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The parts of ``a or b or c``; ``[test]`` for any other test."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return [*_alternatives(test.left), *_alternatives(test.right)]
    return [test]


def _checks_finiteness(node: cst.CSTNode, ctx: Context) -> bool:
    """Does ``node`` hold a finiteness test of training signal or a checking call?"""
    for child in walk(node):
        if isinstance(child, cst.If | cst.Assert) and ctx.is_nonfinite_test(child.test):
            return True
        if isinstance(child, cst.Call) and ctx.called(child) in vocab.CHECK_CALLS:
            return True
    return False


class PeriodicFiniteCheck(Rule):
    code = "NZ501"
    VALID = [
        Example("""\
            from nozero import check_finite
            check_finite(loss=loss, grad_norm=gn, step=step)
            """),
        Example("""\
            if step % 100 == 0:
                print(loss)
            """),
        Example("""\
            import numpy as np
            if step % log_freq == 0 or np.isnan(loss):
                logger.info("step %d loss %.3f", step, loss)
            """),
    ]
    INVALID = [
        Example(
            """\
            from nozero import check_finite
            if step % 100 == 0:
                check_finite(loss=loss, grad_norm=gn, step=step)
            """,
            line=2,
        ),
        Example(
            """\
            import math
            if step % 10 == 0 and math.isnan(loss):
                raise FloatingPointError(step)
            """,
            line=2,
        ),
        Example(
            """\
            import math
            if not step % 50:
                assert math.isfinite(loss)
            """,
            line=2,
        ),
    ]

    def visit_If(self, node: cst.If, ctx: Context) -> None:
        if not any(_periodic(child) for child in walk(node.test)):
            return
        # ``step % N == 0 or isnan(loss)``: the test runs every step, beside the period
        alternatives = _alternatives(node.test)
        if len(alternatives) > 1 and any(
            ctx.is_nonfinite_test(part) and not any(_periodic(c) for c in walk(part))
            for part in alternatives
        ):
            return
        if ctx.is_nonfinite_test(node.test) or _checks_finiteness(node.body, ctx):
            ctx.report(node, self)


RULES: list[type[Rule]] = [PeriodicFiniteCheck]
