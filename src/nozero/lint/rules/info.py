"""NZ5xx: informational, off by default."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from nozero.lint import vocab
from nozero.lint.rules.base import Context, Rule, walk

# ``step % N == 0`` (either side) and ``not step % N``.
_MODULO = m.BinaryOperation(operator=m.Modulo())
_PERIODIC = m.Comparison(
    left=_MODULO, comparisons=[m.ComparisonTarget(operator=m.Equal(), comparator=m.Integer("0"))]
) | m.UnaryOperation(operator=m.Not(), expression=_MODULO)


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
        "from nozero import check_finite\ncheck_finite(loss=loss, grad_norm=gn, step=step)\n",
        "if step % 100 == 0:\n    print(loss)\n",
    ]
    INVALID = [
        "from nozero import check_finite\nif step % 100 == 0:\n"
        "    check_finite(loss=loss, grad_norm=gn, step=step)\n",
        "import math\nif step % 10 == 0 and math.isnan(loss):\n"
        "    raise FloatingPointError(step)\n",
        "import math\nif not step % 50:\n    assert math.isfinite(loss)\n",
    ]

    def visit_If(self, node: cst.If, ctx: Context) -> None:
        if not m.findall(node.test, _PERIODIC):
            return
        if ctx.is_nonfinite_test(node.test) or _checks_finiteness(node.body, ctx):
            ctx.report(node, self)


RULES: list[type[Rule]] = [PeriodicFiniteCheck]
