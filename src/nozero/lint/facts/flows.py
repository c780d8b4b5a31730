"""Finiteness flows through one file: from where a fact is established to where training
reacts to it.

A fact is a test of training signal for NaN/Inf (``isnan(loss)``, ``g != g``,
``loss == inf``), the result of a library helper (``check_using_norm``, ``is_fin`` from a
dynamic loss scale, ``found_inf``), or a flag holding either: a local, a ``self.``
attribute set in any method of the class, an element of a same-file function's
(tuple) result, a reduction of a flag (``all_reduce``, ``.item()``, ``bool()``), or a
constant set where a test found a non-finite value (``overflow = True``).

A reaction is what the code does where the fact says "non-finite": leaves the step
(``return``, ``continue``, ``break``, an optimizer step only taken when finite), zeroes
the gradients, replaces the value, drops the samples, or keeps the old state through a
select. Each reaction is reported once, at its own line, with the route that led to it.
The pass reads the whole file with the standard library's ``ast``, so its answers never
depend on which parts the pre-filter hands to libcst.

This module holds the walk over functions and statements. ``Flows`` mixes in the rest:
``flow_reactions`` (what a branch taken on a flag does), ``flow_selections`` (reactions
inside one statement), ``flow_record`` (writing a reaction down, where a function steps)
and ``flow_flags`` (sources: what a test says); ``flow_types`` holds the records and
``flow_helpers`` the syntactic predicates they share. Each part calls only the parts
after it in that list, never back, with one exception: reading what a same-file helper
returns (``FlagsPart._helper_returns``) runs this walk over the helper's body.
"""

from __future__ import annotations

import ast
import dataclasses
from bisect import bisect_right
from collections.abc import Callable, Iterator

from nozero.lint import vocab
from nozero.lint.facts.flow_flags import FlagsPart
from nozero.lint.facts.flow_helpers import (
    _DETACHING,
    _HELPER_CLASS_WORDS,
    _NAMED_TRAINING,
    _NAMES,
    _SOURCE_WORDS,
    _added_to_itself,
    _any_within,
    _caught,
    _child_statements,
    _constant_truth,
    _counts_up,
    _is_bool_constant,
    _is_model_class,
    _item_key,
    _key,
    _line_range,
    _named_flag,
    _names,
    _names_a_scaler,
    _names_training,
    _origin_names,
    _outside_amp_switches,
    _scaler_present,
    _short,
    _statements,
    _tests_a_loss,
    _trains_by_itself,
    _uses_switched_scaler,
    _walk,
    asks_to_stop,
)
from nozero.lint.facts.flow_reactions import ReactionsPart
from nozero.lint.facts.flow_record import RecordPart
from nozero.lint.facts.flow_selections import SelectionsPart
from nozero.lint.facts.flow_types import _DEFS, _LOOPS, WHAT, Flag, Reaction, Route, _Unit
from nozero.lint.facts.scopes import (
    FileFacts,
    FunctionNode,
    parameter_names,
    steps_an_optimizer,
)
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.lines import line_starts, split_lines
from nozero.lint.scaling import scaler_at_work, scaler_in_lines
from nozero.lint.tables.reactions import CLAMP_UPPER_KEYWORDS, CLAMPS

# Other modules import these from here.
__all__ = ["WHAT", "Flag", "Flows", "Reaction", "Route"]


# Words of a list or total kept per epoch for the report (``epoch_losses``): the losses
# the steps already trained on, averaged for the log.
_PER_EPOCH = frozenset({"epoch", "epochs"})


class Flows(ReactionsPart, SelectionsPart, RecordPart, FlagsPart):
    """The reactions of one file, computed once on first use."""

    def __init__(self, facts: FileFacts) -> None:
        self.facts = facts
        self.text = facts.source
        self._class_flags: dict[int, dict[str, Flag]] = {}
        self._helper_memo: dict[str, dict[int | None, Flag]] = {}
        self._reactions: dict[tuple[int, int, str], Reaction] = {}
        # (first, last line) of each branch whose reaction is recorded
        self._reacted_branches: list[tuple[int, int]] = []
        self._done = False
        self._collect = False
        self._flag_lines: dict[str, list[int]] = {}
        self._given: dict[tuple[str, str], Flag] = {}
        self._drawn_memo: dict[int, set[str]] = {}  # a function's names bound to random draws

    # ---- the front door -----------------------------------------------------------
    def reactions(self) -> list[Reaction]:
        if not self._done:
            self._run()
            self._done = True
        return sorted(self._reactions.values(), key=lambda r: (r.line, r.col, r.kind))

    def _run(self) -> None:
        tree = self.facts.tree
        words = _SOURCE_WORDS | frozenset(self.facts.imported)  # helpers from the project
        self._lines = self._word_lines(words, named_tests=True)
        if "==" in self.text:  # ``loss == inf``
            self._lines |= {
                number
                for number, line in enumerate(split_lines(self.text), 1)
                if "==" in line and vocab.INF_COMPARISON.search(line)
            }
        starts = line_starts(self.text)  # ``loss < limit`` (NaN fails it), ``g.ne(g)``
        self._lines |= {bisect_right(starts, at) for at in vocab.implicit_tests(self.text)}
        self._sorted_lines = sorted(self._lines)
        definitions = [n for n in _statements(tree) if isinstance(n, _DEFS)]
        classes = [n for n in definitions if isinstance(n, ast.ClassDef)]
        self._enclosing = {
            id(child): node
            for node in definitions
            for child in _child_statements(node)
            if isinstance(child, _DEFS)
        }
        self._scaler_memo: dict[int, bool] = {}
        self._collect = True
        found: set[str] = set()
        for cls in classes:  # ``self.overflow = has_overflow(...)`` in any method
            flags: dict[str, Flag] = {}
            for method in cls.body:
                if (
                    isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef)
                    and self._holds(method)
                    and not self.facts.in_test(method.lineno)  # its flags serve tests only
                ):
                    unit = self._read_function(method, {})
                    flags.update({k: v for k, v in unit.env.items() if k.startswith("self.")})
            self._class_flags[id(cls)] = flags
            found |= {key.removeprefix("self.") for key in flags}
        for fn in definitions:  # same-file functions that may hand back a flag
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and self._holds(fn):
                found.add(fn.name)
        tests = {  # same-file functions named for a finiteness test (``has_nan``)
            fn.name
            for fn in definitions
            if isinstance(fn, FunctionNode) and vocab.nonfinite_name_polarity(fn.name) is not None
        }
        if vocab.passes_predicates(self.text, tests):  # ``train(..., reject=has_nan)``
            module_unit = _Unit(tree, lambda: self.facts.scope(0), {}, False)
            self._given = self.given_predicates(module_unit)
        found |= {param for _, param in self._given}
        self._collect = False
        if found:
            self._lines |= self._word_lines(found)
            self._sorted_lines = sorted(self._lines)
        self._reactions, self._reacted_branches = {}, []
        module = _Unit(
            tree,
            lambda: self.facts.scope(0),
            {},
            scaler_in_lines(self.facts.nodes(tree), self.text, 1, len(self.text.splitlines()) + 1),
            trains_of=lambda: self._trains(tree),
        )
        self._block(module, tree.body, 0, None)
        self._visit_functions(tree, {})
        self._drop_marks_reacted_to()
        self._drop_flags_of_reacted_branches()

    def _drop_marks_reacted_to(self) -> None:
        """One site, one finding: a skip mark that this file's own code skips on is
        reported where it skips."""
        flagged_at = {r.route.line for r in self._reactions.values() if r.route.flag}
        for key, reaction in list(self._reactions.items()):
            if reaction.kind == "skip_flag" and reaction.line in flagged_at:
                del self._reactions[key]

    def _drop_flags_of_reacted_branches(self) -> None:
        """One site, one finding: a flag set in a branch already reported for its own
        reaction (``optimizer.zero_grad(); skip = True; break``) is not reported again
        where the flag is read later (``if skip: continue``). A loss scaler's overflow
        flag is left as it is: each step of its protocol is a site of its own (NZ406)."""
        for key, reaction in list(self._reactions.items()):
            set_at = reaction.route.line
            if (
                reaction.route.flag
                and not reaction.scaling
                and any(
                    first <= set_at <= last < reaction.line
                    for first, last in self._reacted_branches
                )
            ):
                del self._reactions[key]

    def _interesting(self, unit: _Unit, stmt: ast.stmt) -> bool:
        """Do the statement's lines hold a finiteness word or a flag's name?"""
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        if _any_within(self._sorted_lines, first, last):
            return True
        return any(_any_within(self._lines_of_flag(key), first, last) for key in unit.env)

    def _word_lines(
        self, words: set[str] | frozenset[str], comparisons: bool = True, named_tests: bool = False
    ) -> set[int]:
        """Lines holding one of ``words``, a self-comparison, and (``named_tests``) a name
        of a finiteness test (``has_nan_or_inf``)."""
        text = self.text
        offsets = vocab.word_offsets(text, words)
        if comparisons:
            offsets += vocab.self_comparisons(text)
        if named_tests:
            offsets += vocab.nonfinite_test_names(text)
        starts = line_starts(text)
        return {bisect_right(starts, offset) for offset in offsets}

    def _holds(self, fn: ast.AST, env: dict[str, Flag] | None = None) -> bool:
        """Does the function's text hold a word a finiteness fact needs, or the name of
        a flag in ``env`` (the flags of the function it is nested in)?"""
        first, last = fn.lineno, fn.end_lineno or fn.lineno  # type: ignore[attr-defined]
        if _any_within(self._sorted_lines, first, last):
            return True
        return any(_any_within(self._lines_of_flag(key), first, last) for key in env or ())

    def _lines_of_flag(self, key: str) -> list[int]:
        word = key.rsplit(".", 1)[-1]
        if word.endswith("]"):  # ``stats[nonfinite]``: the entry's own key
            word = word[word.index("[") + 1 : -1]
        if word not in self._flag_lines:
            self._flag_lines[word] = sorted(self._word_lines({word}, comparisons=False))
        return self._flag_lines[word]

    def _visit_functions(self, root: ast.AST, inherited: dict[str, Flag]) -> None:
        """Read each function that holds a finiteness word. A test (and what it nests)
        is not read: no reaction in a test is reported."""
        for node in _child_statements(root):
            if isinstance(node, ast.ClassDef):
                flags = self._class_flags.get(id(node), {})
                for child in node.body:
                    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                        if self._holds(child, flags) and not self.facts.in_test(child.lineno):
                            unit = self._read_function(child, flags)
                            self._visit_functions(child, {**flags, **unit.env})
                    elif isinstance(child, ast.ClassDef):
                        self._visit_functions(ast.Module(body=[child], type_ignores=[]), {})
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if self._holds(node, inherited) and not self.facts.in_test(node.lineno):
                    unit = self._read_function(node, inherited)
                    # a function nested in it sees its flags (``def _update(new, old):
                    # return where(valid_step, new, old)``)
                    self._visit_functions(node, {**inherited, **unit.env})
            else:
                self._visit_functions(node, inherited)

    def _read_function(self, fn: FunctionNode, inherited: dict[str, Flag]) -> _Unit:
        unit = _Unit(
            fn,
            lambda: self.facts.scope(fn.lineno),
            dict(inherited),
            self._scaler_near(fn),
            steps_of=lambda: self._steps(fn),
            trains_of=lambda: self._trains(fn),
        )
        self._block(unit, fn.body, 0, None)
        return unit

    def _scaler_near(self, fn: ast.AST) -> bool:
        """Is a dynamic loss scaler at work in the function or a function around it, or
        does its class implement one (DeepSpeed lowers ``cur_scale`` in another method
        of the optimizer)?"""
        node: ast.AST | None = fn
        while node is not None:
            key = id(node)
            if key not in self._scaler_memo:
                is_class = isinstance(node, ast.ClassDef)
                nodes = ast.walk(node) if is_class else self._unswitched(node)
                first, last = _line_range(node)
                self._scaler_memo[key] = scaler_in_lines(
                    nodes, self.text, first, last, implemented=is_class
                )
            if self._scaler_memo[key]:
                return True
            node = self._enclosing.get(key)
        return False

    def _unswitched(self, fn: ast.AST) -> Iterator[ast.AST]:
        """The function's nodes but those on the scaler's side of an AMP switch (see
        ``_outside_amp_switches``). Lazy: most functions' text names no scale, and then
        nothing is walked."""
        yield from _outside_amp_switches(self.facts.nodes(fn))

    def _scales(self, branch: list[ast.stmt]) -> bool:
        """Does a scaler work in ``branch`` (the scaler's side of an AMP switch)?"""
        return scaler_at_work(_walk(branch))

    def _trains(self, root: ast.AST) -> bool:
        """Does the code step, compute gradients or loop over batches, or is it named
        for a step or a loss (Lightning's ``training_step`` steps by returning)?"""
        owner = self._enclosing.get(id(root))
        helper = isinstance(owner, ast.ClassDef) and bool(
            _HELPER_CLASS_WORDS.intersection(vocab.name_words(owner.name))
        )
        if not helper and _NAMED_TRAINING.intersection(vocab.name_words(getattr(root, "name", ""))):
            return True
        for node in self.facts.nodes(root):
            if isinstance(node, ast.Call):
                if _names_training(self._called(node)):
                    return True
            elif isinstance(node, ast.For | ast.AsyncFor):
                words = {w for n in _names(node.target) for w in vocab.name_words(n)}
                if words & {"batch", "batches", "sample", "samples", "minibatch"}:
                    return True
        return False

    # ---- statements ---------------------------------------------------------------
    def _block(self, unit: _Unit, body: list[ast.stmt], loops: int, bad: Flag | None) -> None:
        for stmt in body:
            self._statement(unit, stmt, loops, bad)

    def _statement(self, unit: _Unit, stmt: ast.stmt, loops: int, bad: Flag | None) -> None:
        if isinstance(stmt, _DEFS):
            return
        if bad is None and not self._interesting(unit, stmt):
            return  # no finiteness word and no flag name: nothing here to follow
        self._expressions(unit, stmt, in_bad_branch=bad is not None)
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            self._assign(unit, stmt, bad)
        elif isinstance(stmt, ast.If):
            self._if(unit, stmt, loops, bad)
        elif isinstance(stmt, _LOOPS):
            self._block(unit, stmt.body, loops + 1, bad)
            self._block(unit, stmt.orelse, loops, bad)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            self._block(unit, stmt.body, loops, bad)
        elif isinstance(stmt, ast.Try | ast.TryStar):
            self._block(unit, stmt.body, loops, bad)
            for handler in stmt.handlers:
                self._handler(unit, handler, stmt.body, loops)
            self._block(unit, stmt.orelse, loops, bad)
            self._block(unit, stmt.finalbody, loops, bad)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                self._block(unit, case.body, loops, bad)
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            self._note_return(unit, stmt.value, bad)

    def _note_return(self, unit: _Unit, value: ast.expr, bad: Flag | None = None) -> None:
        found = self.flag_of(unit, value)
        if found is None and bad is not None and _is_bool_constant(value):
            # ``if not isfinite(p.grad).all(): return False``: the verdict handed back
            found = bad[0], bool(value.value)  # type: ignore[attr-defined]
        if found:
            unit.returns[None] = found
        if isinstance(value, ast.Tuple):
            for index, element in enumerate(value.elts):
                found = self.flag_of(unit, element)
                if found:
                    unit.returns[index] = found

    def _assign(
        self, unit: _Unit, stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, bad: Flag | None
    ) -> None:
        value = stmt.value
        if value is None:
            return
        if unit.trains and _clamps_a_loss(self.facts.called, stmt):
            route = Route(stmt.lineno, _short(self.text, value), None, False)
            self._add(unit, "clamp_loss", stmt, route)
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        truth = _constant_truth(value) if bad is not None else None
        if bad is not None and truth is None and self._collect and _counts_up(stmt):
            # ``nonfinite += 1`` in a helper read for what it hands back: the count it
            # returns holds the test's answer (a count kept in the loop itself is most
            # often logged, or held against a patience, so it is read as before)
            if isinstance(stmt.target, ast.Name):
                truth = True
        if bad is not None and truth is not None:
            # ``overflow = True`` (or ``torch.tensor([1.0])``) where a non-finite value was found
            route, polarity = bad
            for target in targets:
                key = _key(target) or _item_key(target)
                if key and not asks_to_stop(key):
                    flag_route = Route(
                        stmt.lineno,
                        route.origin if not route.flag else f"{route.flag}",
                        key.removeprefix("self."),
                        route.scaling,
                        looked_at=frozenset(_origin_names(route)),
                    )
                    unit.env[key] = (flag_route, truth)
            return
        found = self.flag_of(unit, value)
        if isinstance(stmt, ast.AugAssign):
            key = _key(stmt.target)
            if key and key in unit.env and not found:
                return
        if not found and not isinstance(value, ast.Constant):
            # a flag re-bound to something that is no test, and not made from the flag
            # (``valid_mask = (pos > 0) & (neg > 0)`` after a logged ``isnan``), is gone;
            # a constant is left alone: it resets or defaults the flag on one path only
            mentioned = {dotted_name(n) for n in ast.walk(value) if isinstance(n, _NAMES)}
            for target in targets:
                key = _key(target)
                if key and key in unit.env and key not in mentioned:
                    del unit.env[key]
        for target in targets:
            if found:
                key = _key(target) or _item_key(target)  # ``stats["nonfinite"] = ...``
                if key and not asks_to_stop(key):
                    route, polarity = found
                    if route.flag is None:  # a test bound to a name: weak stays weak
                        route = dataclasses.replace(
                            route, line=stmt.lineno, flag=key.removeprefix("self.")
                        )
                    if unit.scaler_branch and not route.scaling:  # set on the scaler's side
                        route = dataclasses.replace(route, scaling=True)
                    unit.env[key] = (route, polarity)
                    if not route.weak and "skip" in vocab.name_words(key.rsplit(".", 1)[-1]):
                        self._add(unit, "skip", stmt, route)  # the decision to skip
            elif isinstance(target, ast.Tuple | ast.List):
                self._unpack(unit, target, value, stmt.lineno)
            elif isinstance(value, ast.Call | ast.Subscript):
                key = _key(target)
                named = _named_flag(key, stmt.lineno, self._opaque(value), unit.scaling)
                if named:
                    unit.env[key] = named  # type: ignore[index]

    def _unpack(
        self, unit: _Unit, target: ast.Tuple | ast.List, value: ast.expr, line: int
    ) -> None:
        returned: dict[int | None, Flag] = {}
        if isinstance(value, ast.Call):
            helper = self.facts.helper_name(value.func)
            if helper is not None:
                returned = self._helper_returns(helper)
        for index, element in enumerate(target.elts):
            key = _key(element)
            if not key:
                continue
            if index in returned:
                route, polarity = returned[index]
                origin = f"{self._called(value)}()"
                unit.env[key] = (Route(line, origin, key, route.scaling, in_tuple=True), polarity)
            elif isinstance(value, ast.Call):
                named = _named_flag(key, line, self._opaque(value), unit.scaling)
                if named:
                    unit.env[key] = named

    def _opaque(self, value: ast.Call | ast.Subscript) -> str:
        """How a route names a value read from somewhere the pass cannot see into: the
        call (``check_overflow()``) or the lookup (``state["found_inf"][device]``)."""
        if isinstance(value, ast.Call):
            return f"{self._called(value)}()"
        return _short(self.text, value)

    def _handler(
        self, unit: _Unit, handler: ast.ExceptHandler, guarded: list[ast.stmt], loops: int
    ) -> None:
        caught = _caught(handler, self.facts)
        if "OverflowError" in caught and unit.trains and self._trains_on_signal(unit, guarded):
            # a scaler raises it: one used only on the fp16 side of a switch still counts
            scaling = unit.scaling
            if not scaling and isinstance(unit.node, FunctionNode):
                first, last = _line_range(unit.node)
                nodes = self.facts.nodes(unit.node)
                scaling = scaler_in_lines(nodes, self.text, first, last)
            route = Route(handler.lineno, "OverflowError", None, scaling)
            self._react(unit, handler.body, (route, True), set(), loops, handler)
            self._block(unit, handler.body, loops, (route, True))
        else:
            self._block(unit, handler.body, loops, None)

    def _trains_on_signal(self, unit: _Unit, guarded: list[ast.stmt]) -> bool:
        """Does the code an ``except OverflowError`` guards train (a training call, and
        training signal)? An fp16 optimizer raises it on overflowing gradients, but it
        also comes from a finite loss exponentiated for a perplexity (``math.exp(loss)``)
        and from integer conversions (a tokenizer's ids): neither is a non-finite check."""
        nodes = [node for stmt in guarded for node in ast.walk(stmt)]
        training = [
            node
            for node in nodes
            if isinstance(node, ast.Call) and _names_training(self._called(node))
        ]
        if any(_trains_by_itself(self._called(call), call.func) for call in training):
            return True  # ``loss.backward()``, ``self.optimizer.step()``, ``train_step(...)``
        return bool(training) and any(
            isinstance(node, ast.Name | ast.Attribute) and self.facts.is_signal(node, unit.scope)
            for node in nodes
        )

    def _if(self, unit: _Unit, stmt: ast.If, loops: int, bad: Flag | None) -> None:
        found = self.flag_of(unit, stmt.test) or self.limit_flag(unit, stmt.test)
        if found is not None and found[0].weak:
            self._clamped(unit, stmt, found)
            if self._gates_a_step(unit, stmt, found, loops):
                self._add(unit, "not_taken", stmt, found[0])
            found = None
        if found is None:
            present = _scaler_present(stmt.test)
            for branch, scaler in ((stmt.body, present), (stmt.orelse, not present)):
                scaling, scaler_branch = unit.scaling, unit.scaler_branch
                if present is not None:
                    # ``if self.scaler is not None: ... else:``: no scaler in the ``else``;
                    # ``if self.use_amp: scaler.step(opt)``: the scaler's own branch
                    unit.scaling = bool(scaler) and (
                        scaling or self._scales(branch) or _uses_switched_scaler(stmt.test, branch)
                    )
                    unit.scaler_branch = unit.scaling
                try:
                    self._block(unit, branch, loops, bad)
                finally:
                    unit.scaling, unit.scaler_branch = scaling, scaler_branch
            return
        route, polarity = found
        bad_branch, good_branch = (stmt.body, stmt.orelse) if polarity else (stmt.orelse, stmt.body)
        tested = _names(stmt.test)
        scaling = unit.scaling
        mentioned = [*ast.walk(stmt.test), *_outside_amp_switches(_walk(bad_branch))]
        if not scaling and any(map(_names_a_scaler, mentioned)):
            unit.scaling = True  # ``if scaler.has_overflow_serial or ...``: the scaler's
        elif scaling and not route.scaling and _tests_a_loss(tested | _origin_names(route)):
            unit.scaling = False  # a non-finite loss is no fp16 gradient overflow
        try:
            self._react_to_test(unit, stmt, found, tested, loops, bad_branch, good_branch)
        finally:
            unit.scaling = scaling
        self._block(unit, good_branch, loops, bad)

    def _react_to_test(
        self,
        unit: _Unit,
        stmt: ast.If,
        found: Flag,
        tested: set[str],
        loops: int,
        bad_branch: list[ast.stmt],
        good_branch: list[ast.stmt],
    ) -> None:
        """The reaction to a finiteness test ``stmt``: its bad branch's first one, a step
        taken only when the values are finite, or only the finite terms gathered."""
        route = found[0]
        steps_when_finite = any(
            self._is_update(n) for s in good_branch for n in self.facts.nodes(s)
        )
        if route.implicit and steps_when_finite and bad_branch:
            # ``if loss < limit: <step> else: <count, log, zero the loss>``: a NaN goes
            # down the ``else`` instead of the step, whatever that branch then does
            if self._branch(unit, bad_branch, tested, loops, stmt) is not None:
                self._add(unit, "skip", bad_branch[0], route)
            return
        # a bad branch that only observes: ``if overflow: log.warning(...) else:
        # optimizer.step()`` takes no step; ``if finite: total += loss else: log(...)``
        # leaves the bad term out
        observes_only = bool(bad_branch) and self._branch(
            unit, bad_branch, tested, loops, stmt
        ) == ("go_on", stmt)
        warns_only = observes_only and steps_when_finite
        reacted = (
            bool(bad_branch)
            and not warns_only
            and self._react(unit, bad_branch, found, tested, loops, stmt)
        )
        if (
            not reacted
            and (not bad_branch or warns_only or route.scaling or unit.scaling)
            and steps_when_finite
        ):
            self._add(unit, "not_taken", stmt, route)
        elif (
            not reacted
            and (not bad_branch or observes_only)
            and (gathered := self._gathers(unit, good_branch, tested))
        ):
            self._add(unit, gathered, stmt, route)  # ``if not isnan(loss): losses.append(loss)``
        before = len(self._reactions)
        self._block(unit, bad_branch, loops, found)
        if len(self._reactions) > before:  # one site, one finding: the branch's own one
            self._reactions.pop((stmt.lineno, stmt.col_offset, "go_on"), None)

    def _gathers(self, unit: _Unit, branch: list[ast.stmt], tested: set[str]) -> str:
        """Does ``branch`` add a tested value that is training signal to a running total
        or a list (``losses.append(loss)``, ``total += loss``)? Taken only when the value
        is finite, it leaves the non-finite ones out of the sum: ``drop_term`` for a term
        added to a total, ``drop`` for an item gathered into a list ('' when neither)."""
        for stmt in branch:
            kind = "drop_term"
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
                added, total = stmt.value, stmt.target
            elif isinstance(stmt, ast.Assign) and (added := _added_to_itself(stmt)) is not None:
                total = stmt.targets[0]  # ``gen_loss = gen_loss + pl_loss``
            elif isinstance(stmt, ast.Assign) and self._first_of_a_total(unit, stmt):
                added, total = stmt.value, stmt.targets[0]  # ``l1_loss = l1.unsqueeze(-1)``
            elif (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and stmt.value.func.attr in ("append", "extend")
                and stmt.value.args
            ):
                added, total = stmt.value.args[0], stmt.value.func.value
                kind = "drop"
            else:
                continue
            detached = any(
                isinstance(n, ast.Call) and self._called(n) in _DETACHING for n in ast.walk(added)
            )
            # a part joined to a total named for a loss is a term of that loss; one kept
            # for the logs (``self.grad_norm_history.append(gn)``) is no term of any
            while isinstance(total, ast.Subscript):
                total = total.value  # ``epoch_losses[key].append(v)``: the record's name
            total_name = last_part(dotted_name(total) or "")
            into_a_loss = vocab.is_loss_name(total_name)
            words = set(vocab.name_words(total_name))
            if (
                _names(added) & tested
                and not detached
                and not vocab.is_log_record_name(total_name)
                and not words & _PER_EPOCH  # ``epoch_losses``: what the epoch's report averages
                and (into_a_loss or self._signal(unit, added, set()))
            ):
                return kind
        return ""

    def _first_of_a_total(self, unit: _Unit, stmt: ast.Assign) -> bool:
        """Does ``stmt`` start a running total that the function adds to elsewhere
        (``l1_loss = l1.unsqueeze(-1)`` beside ``l1_loss = cat((l1_loss, l1...))``)? Its
        first term, taken only when finite, is left out as the later ones are."""
        if len(stmt.targets) != 1 or not (total := dotted_name(stmt.targets[0])):
            return False
        for node in self.facts.nodes(unit.node):
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                if dotted_name(node.target) == total:
                    return True
            elif node is not stmt and isinstance(node, ast.Assign) and _added_to_itself(node):
                if dotted_name(node.targets[0]) == total:
                    return True
        return False

    def _gates_a_step(self, unit: _Unit, stmt: ast.If, found: Flag, loops: int) -> bool:
        """``if np.isfinite(total_norm): self.optimizer.step()``: an optimizer's step
        taken only when a value is finite, whatever the value is called (a norm handed in
        by another module, a float), with nothing else done when it is not. A non-finite
        value then skips the update silently, as a test of the gradients would."""
        route, polarity = found
        if route.implicit:
            return False
        bad, good = (stmt.body, stmt.orelse) if polarity else (stmt.orelse, stmt.body)
        steps = any(steps_an_optimizer(n) for s in good for n in self.facts.nodes(s))
        tested = _names(stmt.test)
        return steps and (
            not bad or self._branch(unit, bad, tested, loops, stmt) == ("go_on", stmt)
        )

    def _clamped(self, unit: _Unit, stmt: ast.If, found: Flag) -> None:
        """``if not isfinite(h).all(): h = clamp(h, -big, big)``: activations pushed back
        into the finite range (fp16 overflow workarounds in a forward pass)."""
        route, polarity = found
        tested = _names(stmt.test)
        for branch_stmt in stmt.body if polarity else stmt.orelse:
            if isinstance(branch_stmt, ast.Assign) and self._sentinel(unit, branch_stmt.value):
                marked = {_key(t) for t in branch_stmt.targets} & tested
                # ``norm = -1``; a metric's ``f1_score = -1`` only reports its NaN
                if any(not vocab.is_metric_name(key.rsplit(".", 1)[-1]) for key in marked):
                    self._add(unit, "sentinel", branch_stmt, route)
                continue
            if not isinstance(branch_stmt, ast.Assign) or not isinstance(
                branch_stmt.value, ast.Call
            ):
                continue
            targets = {_key(t) for t in branch_stmt.targets}
            if targets & tested and self._called(branch_stmt.value) in CLAMPS:
                self._add(unit, "clamp", branch_stmt, route)
            elif self._resets_model_output(unit, branch_stmt, targets, tested):
                self._add(unit, "replace", branch_stmt, route)

    def _resets_model_output(
        self, unit: _Unit, stmt: ast.Assign, targets: set[str | None], tested: set[str]
    ) -> bool:
        """``if torch.isnan(vel).any(): vel = torch.zeros_like(vel)`` in a model's method:
        a whole value the model computed, not one it was given, put back to a constant
        (zeros, ones) when any element is not finite. The model's output goes on as if
        the model had made it. A matrix put back to the identity is a solver's fallback
        (Koopa's least-squares operator): readers of two samples called it neither."""
        names = {key.removeprefix("self.") for key in targets if key}
        if not names & tested:
            return False
        owner = self._enclosing.get(id(unit.node))
        if not isinstance(owner, ast.ClassDef) or not _is_model_class(owner):
            return False
        if not isinstance(unit.node, FunctionNode):
            return False
        value = stmt.value
        # ``torch.zeros(n).to(device).unsqueeze(0)``: the chain's first call
        while (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and isinstance(value.func.value, ast.Call)
        ):
            value = value.func.value
        return self.facts.is_finite_constant(value) and not names & parameter_names(unit.node)


def _clamps_a_loss(called: Callable[[ast.expr], str], stmt: ast.stmt) -> bool:
    """``loss = torch.clamp(loss, max=1e4)``, ``loss = loss.clamp(0, 10)``: a loss bound
    to a clamp of itself with an upper bound (``clamp(min=0)`` hides no infinity)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return False
    target, value = stmt.targets[0], stmt.value
    name = dotted_name(target)
    if not name or not vocab.is_loss_name(last_part(name)) or not isinstance(value, ast.Call):
        return False
    if called(value.func) not in vocab.CLAMP_CALLS:
        return False
    func = value.func
    method = isinstance(func, ast.Attribute) and dotted_name(func.value) == name
    # ``loss.clamp(lo, hi)`` clamps its receiver; ``torch.clamp(loss, lo, hi)`` its first
    if not method and not (value.args and dotted_name(value.args[0]) == name):
        return False
    bounds = list(value.args) if method else list(value.args[1:])
    upper = next(
        (k.value for k in value.keywords if k.arg in CLAMP_UPPER_KEYWORDS),
        bounds[1] if len(bounds) > 1 else None,
    )
    return upper is not None and not (isinstance(upper, ast.Constant) and upper.value is None)
