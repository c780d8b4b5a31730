"""Scopes: training-signal tracking over the standard library's ``ast`` of one whole file.

Rules match shapes with libcst on a few candidate statements; whether a matched value is
training signal (loss, gradients, updates, parameters, optimizer state) is a question
about the whole file: a name may be assigned from ``jax.grad`` in the same function, a
helper elsewhere in the file may return gradients or test them for NaN. This module
answers those questions from the ``ast`` of the entire file, lazily and memoized, so the
answer never depends on which statements libcst was shown.

The answers are split by concern into mixins, one module each (``scope_functions``,
``scope_signal``, ``scope_tests``, ``scope_helpers``), over the shared ``ast`` helpers
of ``scope_ast``; this module joins them into ``FileFacts`` and re-exports the names other
modules import from it. ``scope_base`` (walks, bindings, name resolution) asks no other
part and ``scope_functions`` only the base; signal, tests and helpers ask one another,
since whether a value is signal can hang on what a same-file helper returns.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from nozero.lint.facts.scope_ast import (
    FunctionNode,
    Scope,
    bound_names,
    cleaned_subjects,
    compares_itself,
    is_inf,
    parameter_defaults,
    parameter_names,
    self_comparable,
    source_segment,
    steps_an_optimizer,
)
from nozero.lint.facts.scope_base import BaseFacts
from nozero.lint.facts.scope_functions import FunctionFacts
from nozero.lint.facts.scope_helpers import HelperFacts
from nozero.lint.facts.scope_signal import SignalFacts
from nozero.lint.facts.scope_tests import ExpressionFacts
from nozero.lint.prefilter import units_with_triggers


class FileFacts(FunctionFacts, SignalFacts, ExpressionFacts, HelperFacts, BaseFacts):
    """Lazy, memoized answers about training signal in one parsed file."""

    def __init__(
        self,
        tree: ast.Module,
        source: str,
        aliases: dict[str, str],
        *,
        test_module: bool = False,
        imported: Mapping[str, Any] | None = None,
    ) -> None:
        self.tree = tree
        # helpers imported from the project, by local name: what their summaries say
        # (``nozero.lint.summary.Helper``); a same-file definition of the name wins
        self.imported = {
            name: helper
            for name, helper in (imported or {}).items()
            if name not in self._functions_by_name
        }
        self.source = source
        self.aliases = aliases
        self.test_module = test_module
        self._scopes: dict[int, Scope] = {}
        self._helper_memo: dict[tuple[str, str], bool] = {}
        self._sanitized: dict[str, list[tuple[int, str]]] = {}
        self._parsed: dict[str, tuple[ast.expr, str]] = {}
        self._bindings_memo: dict[int, list[tuple[set[str], ast.expr]]] = {}
        self._nodes_memo: dict[int, list[ast.AST]] = {}
        # a function's ``with no_grad():`` blocks, by its line (``only_observes``)
        self._no_grad_memo: dict[int, tuple[tuple[int, int], ...] | None] = {}
        # a function's branches taken only when not training, by its line
        self._eval_only_memo: dict[int, tuple[tuple[int, int], ...]] = {}
        # what a function computes its own loss from, by its line (``_key_feeds_a_loss``)
        self._reaching_memo: dict[int, set[str]] = {}
        self.flows: Any = None  # the file's finiteness flows, built by ``facts.reactions``

    def in_a_unit_with_triggers(self, line: int) -> bool:
        """Does trigger text sit in the unit around ``line`` (``prefilter``'s units)?"""
        return any(first <= line <= last for first, last in self._trigger_units)

    @cached_property
    def _trigger_units(self) -> list[tuple[int, int]]:
        return units_with_triggers(self.source, self.tree)


# The names other modules import from here, defined in the modules above.
__all__ = [
    "FileFacts",
    "FunctionNode",
    "Scope",
    "bound_names",
    "cleaned_subjects",
    "compares_itself",
    "is_inf",
    "parameter_defaults",
    "parameter_names",
    "self_comparable",
    "source_segment",
    "steps_an_optimizer",
]
