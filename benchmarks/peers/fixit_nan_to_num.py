"""The benchmark's Fixit 2 rule: flag every ``nan_to_num(...)`` call.

It matches the callee's name as written (``np.nan_to_num``, ``nan_to_num``,
``x.nan_to_num_``), which is cheaper for Fixit than resolving qualified names, so the
comparison errs in Fixit's favour.
"""

import libcst as cst
import libcst.matchers as m
from fixit import Invalid, LintRule, Valid

NAMES = m.Name("nan_to_num") | m.Name("nan_to_num_")


class NanToNumCall(LintRule):
    MESSAGE = "nan_to_num(...) replaces non-finite values"
    VALID = [Valid("np.nanmean(x)"), Valid("nan_to_number(x)")]
    INVALID = [
        Invalid("np.nan_to_num(grads)"),
        Invalid("nan_to_num(g)"),
        Invalid("grads.nan_to_num_()"),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if m.matches(node.func, NAMES | m.Attribute(attr=NAMES)):
            self.report(node)
