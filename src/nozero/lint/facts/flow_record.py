"""Recording a reaction: the one place a finding of the flow pass is written down.

``_add`` keeps a reaction once per site, unless the code around it does not train (a
validation loop, a test, code that only observes); ``_is_update`` and ``_steps`` say
where a function steps. The reaction and selection parts record through here; this
part asks only ``flow_flags`` (what a call is named), so the calls between the parts of
``flows.Flows`` go one way: flows, reactions, selections, record, flags.
"""

from __future__ import annotations

import ast

from nozero.lint.facts.flow_types import _FORCED_SCALING, _NOT_SCALING, Reaction, Route, _Unit


class RecordPart:
    """Writing down a reaction, and where a function steps."""

    def _add(self, unit: _Unit, kind: str, node: ast.AST, route: Route, own: bool = False) -> bool:
        """Record a reaction; False when it is no reaction at all (a flag known by name
        only, in code that does not train). ``own``: the code's own, though a scaler is at
        work beside it (a skip that passes over the scaler's step and update)."""
        if route.by_name and not unit.trains:
            return False  # an ``overflow`` of a buffer, a counter: nothing here trains
        if self._collect:
            return True
        where = getattr(unit.node, "lineno", 0)
        line = getattr(node, "lineno", 1)
        if self.facts.only_observes(where, line) or self.facts.in_test(where):
            return True  # evaluation, metrics, plots and tests touch no training signal
        if self.facts.in_evaluation_loop(unit.node, line):
            return True
        col = getattr(node, "col_offset", 0)
        last = getattr(node, "end_lineno", line) or line
        if isinstance(node, ast.If | ast.ExceptHandler | ast.For | ast.While):
            last = line
        key = (line, col, kind)
        scaling = not own and kind not in _NOT_SCALING
        scaling = scaling and (route.scaling or unit.scaling or kind in _FORCED_SCALING)
        if key not in self._reactions:
            self._reactions[key] = Reaction(kind, line, col, line, last, route, scaling)
        return True

    def _steps(self, fn: ast.AST) -> list[int]:
        return sorted(node.lineno for node in self.facts.nodes(fn) if self._is_update(node))

    def _is_update(self, node: ast.AST) -> bool:
        return self.facts.is_update(node)
