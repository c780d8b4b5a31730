"""The queries every part of ``FileFacts`` asks first: the nodes and bindings of one
scope (walked once, memoized) and what a name or a call resolves to through the file's
imports. They read only the state ``FileFacts.__init__`` sets and ask no other part, so
the other parts (``scope_functions``, ``scope_signal``, ``scope_tests``,
``scope_helpers``) build on them without calling back.
"""

from __future__ import annotations

import ast

from nozero.lint.facts.scope_ast import _bindings, scope_nodes
from nozero.lint.imports import dotted_name, last_part, resolve


class BaseFacts:
    """Walks, bindings and name resolution: the base part of ``FileFacts``."""

    def nodes(self, root: ast.AST) -> list[ast.AST]:
        """``scope_nodes(root)``, walked once: a function is asked about many times."""
        key = id(root)
        found = self._nodes_memo.get(key)
        if found is None:
            found = self._nodes_memo[key] = list(scope_nodes(root))
        return found

    def bindings(self, root: ast.AST) -> list[tuple[set[str], ast.expr]]:
        key = id(root)
        if key not in self._bindings_memo:
            self._bindings_memo[key] = _bindings(self.nodes(root))
        return self._bindings_memo[key]

    def qualified(self, node: ast.expr) -> str | None:
        dotted = dotted_name(node)
        return resolve(dotted, self.aliases) if dotted else None

    def called(self, func: ast.expr) -> str:
        """The last part of what a call goes to, resolved through the file's imports
        (``np.isnan`` -> ``isnan``; ``self.helper`` -> ``helper``)."""
        return last_part(self.qualified(func) or getattr(func, "attr", None))
