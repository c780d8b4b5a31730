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
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from nozero.lint import vocab
from nozero.lint.facts import sources
from nozero.lint.facts.scopes import (
    FileFacts,
    FunctionNode,
    Scope,
    bound_names,
    parameter_names,
    self_comparable,
    source_segment,
)
from nozero.lint.imports import BLOCK_STATEMENTS, dotted_name, last_part
from nozero.lint.lines import line_starts, split_lines
from nozero.lint.scaling import SKIP_REPORTS, scaler_at_work, scaler_in_lines

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_BLOCKS = (*BLOCK_STATEMENTS, ast.excepthandler, ast.match_case)
_SELECT_CALLS = frozenset(
    {"where", "select", "cond", "switch", "tree_where", "select_n", "select_tree"}
)

WHAT = {
    "skip": "the step is skipped here",
    "skip_flag": "the step is marked to be skipped here",
    "zero": "the gradients are zeroed here",
    "zero_value": "the value is set to zero here",
    "late_skip": "the update was already applied; the rest of the iteration is skipped here",
    "not_taken": "the optimizer step is only taken when the values are finite",
    "go_on": "nothing stops training here",
    "replace": "the value is replaced here",
    "drop": "the non-finite samples are dropped here",
    "nan_drop": "the NaN samples are left out here",
    "keep": "the old state is kept here",
    "sentinel": "the value is replaced by a marker for the overflow check here",
    "scaler_step": "the scaler skips this step when the gradients overflow",
    "apex_scale": "apex skips the optimizer step when the scaled gradients overflow",
    "clamp": "the activations are clamped into the finite range here",
}
# Words of a function that runs one round of a longer training run.
_ROUND_WORDS = frozenset({"epoch", "epochs", "round", "rounds", "episode", "episodes"})
_FORCED_SCALING = frozenset({"sentinel", "scaler_step", "apex_scale"})
# ... and those no loss scaler ever does: dropping NaN samples or terms from the loss
_NOT_SCALING = frozenset({"drop", "nan_drop"})
# Calls that join a running total with one more part (``torch.cat((losses, loss))``).
_JOINS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack"})
# Reactions that are a call, not a test: their route names the call.
_CALL_REACTIONS = frozenset({"scaler_step", "apex_scale", "nan_drop"})
_CLAMPS = frozenset({"clamp", "clamp_", "clip", "clip_by_value", "nan_to_num", "where"})


@dataclass(frozen=True)
class Route:
    """Where a finiteness fact was established."""

    line: int
    origin: str  # ``check_using_norm()``, ``isnan(loss)``, ``OverflowError``
    flag: str | None  # the name holding it, None for a test read in place
    scaling: bool  # established where a dynamic loss scaler is at work
    weak: bool = False  # a test of a value not known as training signal
    by_name: bool = False  # a flag known by its name only (``overflow = load(...)``)
    in_tuple: bool = False  # handed back in a tuple by a same-file function
    # names the first test looked at, for a flag set from another (``skip = True`` under
    # ``if is_nan:``, where ``is_nan = isnan(record_loss)``)
    looked_at: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Reaction:
    """What training does with a non-finite value, at one statement."""

    kind: str
    line: int
    col: int  # 0-based UTF-8 byte offset, as ``ast`` counts
    first: int  # the statement's first and last lines, for suppressions
    last: int
    route: Route
    scaling: bool

    def detail(self) -> str:
        route = self.route
        what = WHAT[self.kind]
        if route.flag:
            return f"{route.flag} set at line {route.line} from {route.origin}; {what}"
        if self.kind in _CALL_REACTIONS:
            return f"{route.origin}: {what}"
        if route.line != self.line:
            return f"{route.origin} tested at line {route.line}; {what}"
        return f"{route.origin} tested; {what}"


# A flag: its route and its polarity (True: the value being true means non-finite).
Flag = tuple[Route, bool]


@dataclass
class _Unit:
    """One function (or the module body) being read. Its signal scope is computed on the
    first question that needs it: most functions read hold no test of training signal."""

    node: ast.AST
    scope_of: Callable[[], Scope]
    env: dict[str, Flag]
    scaling: bool
    steps_of: Callable[[], list[int]] = list  # lines of its optimizer steps
    trains_of: Callable[[], bool] = bool  # it steps, computes gradients, loops over batches
    returns: dict[int | None, Flag] = field(default_factory=dict)
    scaler_branch: bool = False  # in the scaler's branch of an AMP switch
    returned: set[str] | None = None  # the names its returns mention, found on first use
    _scope: Scope | None = None
    _steps: list[int] | None = None
    _trains: bool | None = None

    @property
    def scope(self) -> Scope:
        if self._scope is None:
            self._scope = self.scope_of()
        return self._scope

    @property
    def updates_after(self) -> list[int]:
        if self._steps is None:
            self._steps = self.steps_of()
        return self._steps

    @property
    def trains(self) -> bool:
        if self._trains is None:
            self._trains = bool(self.updates_after) or self.trains_of()
        return self._trains


class Flows:
    """The reactions of one file, computed once on first use."""

    def __init__(self, facts: FileFacts) -> None:
        self.facts = facts
        self.text = facts.source
        self._class_flags: dict[int, dict[str, Flag]] = {}
        self._helper_memo: dict[str, dict[int | None, Flag]] = {}
        self._reactions: dict[tuple[int, int, str], Reaction] = {}
        self._done = False
        self._collect = False
        self._flag_lines: dict[str, list[int]] = {}

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
        self._collect = False
        if found:
            self._lines |= self._word_lines(found)
            self._sorted_lines = sorted(self._lines)
        self._reactions = {}
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

    def _drop_marks_reacted_to(self) -> None:
        """One site, one finding: a skip mark that this file's own code skips on is
        reported where it skips."""
        flagged_at = {r.route.line for r in self._reactions.values() if r.route.flag}
        for key, reaction in list(self._reactions.items()):
            if reaction.kind == "skip_flag" and reaction.line in flagged_at:
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

    def _steps(self, fn: ast.AST) -> list[int]:
        return sorted(node.lineno for node in self.facts.nodes(fn) if self._is_update(node))

    def _is_update(self, node: ast.AST) -> bool:
        """A call that steps (``optimizer.step()``, ``apply_updates``, ``backward``)."""
        return isinstance(node, ast.Call) and (
            self._called(node) in vocab.UPDATE_CALLS or _steps_through_a_scaler(node)
        )

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
            self._note_return(unit, stmt.value)

    def _note_return(self, unit: _Unit, value: ast.expr) -> None:
        found = self.flag_of(unit, value)
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
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        truth = _constant_truth(value) if bad is not None else None
        if bad is not None and truth is not None:
            # ``overflow = True`` (or ``torch.tensor([1.0])``) where a non-finite value was found
            route, polarity = bad
            for target in targets:
                key = _key(target)
                if key:
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
                key = _key(target)
                if key:
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

    def _raised_after(self, unit: _Unit, branch: list[ast.stmt], before: ast.stmt) -> bool:
        """Does the branch record an error that the function raises once the loop is left
        (big_vision's ``error = ...; break``, then cleanup, then ``raise RuntimeError(error)``)?"""
        recorded = {
            name
            for stmt in branch[: branch.index(before)]
            if isinstance(stmt, ast.Assign)
            for target in stmt.targets
            for name in _names(target)
        }
        if not recorded or not isinstance(unit.node, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        return any(
            isinstance(node, ast.Raise)
            and node.exc is not None
            and node.lineno > before.lineno
            and recorded & _names(node.exc)
            for node in self.facts.nodes(unit.node)
        )

    def _marked_with_inf(self, unit: _Unit, value: ast.expr) -> bool:
        """Does the function itself set ``value`` (or what it indexes) to infinity? Then
        ``value == inf`` reads a marker it wrote (tokens left out of a search), not a
        non-finite result."""
        base = _base_name(value)
        if base is None or not isinstance(unit.node, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        return any(
            isinstance(node, ast.Assign)
            and _is_inf(node.value)
            and any(_base_name(t) == base for t in node.targets)
            for node in self.facts.nodes(unit.node)
        )

    def _clears_signal(self, unit: _Unit, call: ast.Call) -> bool:
        """Does a zeroing call clear training signal? ``optimizer.zero_grad()`` does;
        ``p.grad.zero_()`` does; ``self.overflow.zero_()`` resets a counter."""
        func = call.func
        if self._called(call) in sources.GRADIENT_CLEARING or not isinstance(func, ast.Attribute):
            return True
        return self._signal(unit, func.value, set())

    def _cleans_tested(self, unit: _Unit, value: ast.expr | None, tested: set[str]) -> bool:
        """Is ``value`` the tested signal cleaned: ``nan_to_num`` of it, or a ``where`` on
        a test of the tested values that puts a constant in? The replace rules report such
        a statement."""
        if not isinstance(value, ast.Call):
            return False
        called = self._called(value)
        if called in vocab.SANITIZERS:
            return self._cleans_signal(unit, value)
        return (
            called == "where"
            and len(value.args) == 3
            and bool(_names(value.args[0]) & tested)
            and any(self.facts.is_finite_constant(put) for put in value.args[1:])
            and any(self._signal(unit, kept, set()) for kept in value.args[1:])
        )

    def _cleans_signal(self, unit: _Unit, call: ast.Call) -> bool:
        """Does a ``nan_to_num`` call clean training signal (its argument, or the tensor
        whose method it is)?"""
        subjects = list(call.args[:1])
        if isinstance(call.func, ast.Attribute):
            subjects.append(call.func.value)
        return any(self._signal(unit, subject, set()) for subject in subjects)

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
        found = self.flag_of(unit, stmt.test)
        if found is not None and found[0].weak:
            self._clamped(unit, stmt, found)
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
            and self._gathers(unit, good_branch, tested)
        ):
            self._add(unit, "drop", stmt, route)  # ``if not isnan(loss): losses.append(loss)``
        before = len(self._reactions)
        self._block(unit, bad_branch, loops, found)
        if len(self._reactions) > before:  # one site, one finding: the branch's own one
            self._reactions.pop((stmt.lineno, stmt.col_offset, "go_on"), None)

    def _gathers(self, unit: _Unit, branch: list[ast.stmt], tested: set[str]) -> bool:
        """Does ``branch`` add a tested value that is training signal to a running total
        or a list (``losses.append(loss)``, ``total += loss``)? Taken only when the value
        is finite, it leaves the non-finite ones out of the sum."""
        for stmt in branch:
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
                added, total = stmt.value, stmt.target
            elif isinstance(stmt, ast.Assign) and (added := _added_to_itself(stmt)) is not None:
                total = stmt.targets[0]  # ``gen_loss = gen_loss + pl_loss``
            elif (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and stmt.value.func.attr in ("append", "extend")
                and stmt.value.args
            ):
                added, total = stmt.value.args[0], stmt.value.func.value
            else:
                continue
            detached = any(
                isinstance(n, ast.Call) and self._called(n) in _DETACHING for n in ast.walk(added)
            )
            # a part joined to a total named for a loss is a term of that loss; one kept
            # for the logs (``self.grad_norm_history.append(gn)``) is no term of any
            total_name = last_part(dotted_name(total) or "")
            into_a_loss = vocab.is_loss_name(total_name)
            if (
                _names(added) & tested
                and not detached
                and not vocab.is_log_record_name(total_name)
                and (into_a_loss or self._signal(unit, added, set()))
            ):
                return True
        return False

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
            if targets & tested and self._called(branch_stmt.value) in _CLAMPS:
                self._add(unit, "clamp", branch_stmt, route)
            elif self._resets_model_output(unit, branch_stmt, targets, tested):
                self._add(unit, "replace", branch_stmt, route)

    def _resets_model_output(
        self, unit: _Unit, stmt: ast.Assign, targets: set[str | None], tested: set[str]
    ) -> bool:
        """``if torch.isnan(vel).any(): vel = torch.zeros_like(vel)`` in a model's method:
        a whole value the model computed, not one it was given, put back to a constant
        (zeros, ones, the identity) when any element is not finite. The model's output
        goes on as if the model had made it."""
        names = {key.removeprefix("self.") for key in targets if key}
        if not names & tested:
            return False
        owner = self._enclosing.get(id(unit.node))
        if not isinstance(owner, ast.ClassDef) or not _is_model_class(owner):
            return False
        if not isinstance(unit.node, FunctionNode):
            return False
        value = stmt.value
        # ``torch.eye(n).to(device).unsqueeze(0).repeat(b, 1, 1)``: the chain's first call
        while (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and isinstance(value.func.value, ast.Call)
        ):
            value = value.func.value
        reset = self.facts.is_finite_constant(value) or (
            isinstance(value, ast.Call) and self._called(value) in _IDENTITIES
        )
        return reset and not names & parameter_names(unit.node)

    # ---- reactions ----------------------------------------------------------------
    def _react(
        self,
        unit: _Unit,
        branch: list[ast.stmt],
        found: Flag,
        tested: set[str],
        loops: int,
        owner: ast.stmt | ast.ExceptHandler,
    ) -> bool:
        """Report the first reaction of a branch taken on a non-finite value. False when
        the branch raises, hands the value back (a search), or does nothing to training."""
        route = found[0]
        outcome = self._branch(unit, branch, tested, loops, owner)
        if outcome is None:
            return False
        kind, node = outcome
        if kind == "go_on":
            if route.scaling or unit.scaling:
                return False  # the scaler's own bookkeeping: NZ406 flags the skip itself
            if self._raise_follows(unit, owner):
                return False  # ``for t in params: if not isfinite(t.grad): print(t)`` ... raise
            steps_here = unit.trains and (loops or unit.updates_after)
            if not (
                steps_here
                or self._checked_before_a_step(unit.node)
                or self._returns_for_training(unit, tested)
            ):
                return False
        return self._add(unit, kind, node, route)

    def _raise_follows(self, unit: _Unit, stmt: ast.AST) -> bool:
        """Does a ``raise`` follow ``stmt`` in a block that holds it (the check only
        reports what the raise after it stops on)?"""
        line = getattr(stmt, "lineno", 0)
        for node in [unit.node, *self.facts.nodes(unit.node)]:
            for field_name in ("body", "orelse", "finalbody"):
                block = getattr(node, field_name, None)
                if not isinstance(block, list):
                    continue
                holder = next((at for at, s in enumerate(block) if _within(s, line)), None)
                if holder is not None and any(
                    isinstance(s, ast.Raise) for s in block[holder + 1 :]
                ):
                    return True
        return False

    def _returns_for_training(self, unit: _Unit, tested: set[str]) -> bool:
        """Is ``unit`` a loss function that hands the tested loss on as it is (``if
        isnan(actor_loss): print(...)`` ... ``return actor_loss, critic_loss``)? What it
        returns is backpropagated: the warning lets the NaN through to the step."""
        fn = unit.node
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if not self.facts.is_loss_function(fn) or self.facts.only_observes(fn.lineno):
            return False
        return self._returns_tested(fn, tested)

    def _returns_tested(self, fn: ast.AST, tested: set[str], after: int = 0) -> bool:
        """Does ``fn`` return a tested value (below line ``after``)?"""
        return any(
            isinstance(node, ast.Return)
            and node.lineno > after
            and node.value is not None
            and bool(_names(node.value) & tested)
            for node in self.facts.nodes(fn)
        )

    def _checked_before_a_step(self, fn: ast.AST) -> bool:
        """Is ``fn`` a check that code which trains calls, drops the answer of, and then
        steps (below the call, or in a loop around it)? Its branch that only observes lets
        that step go on: ``self.check_loss(loss)`` followed by ``optimizer.step()``."""
        for caller, line in self.facts.dropped_calls(getattr(fn, "name", "")):
            if self.facts.in_test(caller.lineno) or self.facts.only_observes(caller.lineno):
                continue
            steps = self._steps(caller)
            if any(step > line for step in steps):
                return True
            loops = (n for n in self.facts.nodes(caller) if isinstance(n, _LOOPS))
            if any(_within(loop, line) and any(_within(loop, s) for s in steps) for loop in loops):
                return True
        return False

    def _break_is_no_skip(self, unit: _Unit, brk: ast.Break, tested: set[str]) -> bool:
        """Does ``brk`` leave its loop for good rather than skip an iteration? It ends a
        search whose tested flag the code after the loop decides on (``if not valid:
        break`` ... ``if not valid: zero_grad()``), or leaves the function's only loop
        for a ``return`` of the tested value (an unroll handing its NaN loss to the
        caller), or ends the training loop itself (``_ends_training``)."""
        around = self._loops_around(unit.node, brk.lineno)
        if not around:
            return False
        innermost = max(around, key=lambda n: n.lineno)
        end = innermost.end_lineno or innermost.lineno
        if any(
            isinstance(node, ast.Name) and node.id in tested and node.lineno > end
            for node in self.facts.nodes(unit.node)
        ):
            return True
        if len(around) != 1:
            return False  # an inner loop: the loop around it goes on
        return self._returns_tested(unit.node, tested, after=end) or self._ends_training(
            unit.node, innermost
        )

    def _ends_training(self, fn: ast.AST, loop: ast.stmt) -> bool:
        """Is ``loop`` (the only one around a break) the training loop itself: it steps
        (before the break, as an epoch loop checking its average loss, or after it),
        nothing steps after it, and the function is not one round (an epoch) of a longer
        run? Training stops there, as it would on a raise."""
        steps = self._steps(fn)
        if not any(_within(loop, line) for line in steps):
            return False
        if any(line > (loop.end_lineno or loop.lineno) for line in steps):
            return False
        return not self._one_round(fn)

    def _returns_from_training(self, unit: _Unit, stmt: ast.Return) -> bool:
        """Does a bare ``return`` leave the training loop itself (see ``_ends_training``)
        of the function that trains, ending the run rather than skipping a step?"""
        if stmt.value is not None and not (
            isinstance(stmt.value, ast.Constant) and stmt.value.value is None
        ):
            return False
        around = self._loops_around(unit.node, stmt.lineno)
        if not around or _is_step(unit.node):
            return False
        return self._ends_training(unit.node, min(around, key=lambda n: n.lineno))

    def _loops_around(self, fn: ast.AST, line: int) -> list[ast.stmt]:
        return [n for n in self.facts.nodes(fn) if isinstance(n, _LOOPS) and _within(n, line)]

    def _one_round(self, fn: ast.AST) -> bool:
        """Is ``fn`` one round of a longer run: named or given an epoch (``train_epoch``,
        ``def train(model, loader, epoch)``), or called in a loop in this file?"""
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
        if any(
            isinstance(loop, ast.For | ast.AsyncFor)
            and {w for n in _names(loop.target) for w in vocab.name_words(n)} & _ROUND_WORDS
            for loop in self.facts.nodes(fn)
        ):
            return False  # ``for epoch in range(epochs)``: it runs every round itself
        words = {w for name in {fn.name, *parameter_names(fn)} for w in vocab.name_words(name)}
        if words & _ROUND_WORDS:
            return True
        for loop in ast.walk(self.facts.tree):
            if isinstance(loop, _LOOPS):
                for node in ast.walk(loop):
                    if isinstance(node, ast.Call) and self.facts.helper_name(node.func) == fn.name:
                        return True
        return False

    def _raises(self, stmt: ast.stmt) -> bool:
        """``raise ...``, or a call that raises (``sys.exit``, a same-file raising helper)."""
        if isinstance(stmt, ast.Raise):
            return True
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return False
        called = self._called(stmt.value)
        return called in vocab.RAISING_CALLS or (
            self.facts.defines_function(called) and self.facts.is_raising_helper(called)
        )

    def _branch(
        self,
        unit: _Unit,
        branch: list[ast.stmt],
        tested: set[str],
        loops: int,
        owner: ast.AST,
        inner: bool = False,
    ) -> tuple[str, ast.AST] | None:
        """(kind, statement) of the first reaction in ``branch``; None if it raises or
        hands the values back; ("go_on", owner) if it only observes. ``inner``: the
        branch is the body of a loop the reaction's own branch runs (``for opt in
        optimizers: if ...: continue``), whose ``continue`` and ``break`` leave no step."""
        for at, stmt in enumerate(branch):
            if self._raises(stmt):
                return None
            if isinstance(stmt, ast.Assert):
                return None  # ``assert mask.count_nonzero() == 0``: only an explained NaN passes
            if any(self._raises(later) for later in branch[at + 1 :]) and isinstance(
                stmt, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign
            ):
                continue  # ``loss_summary = {...}; raise RuntimeError(...)``: it stops
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                called = self._called(stmt.value)
                if (
                    called in sources.ZEROING_CALLS
                    or called in vocab.MASKED_FILL
                    or (called in sources.FILL_CALLS and _zero_arg(stmt.value))
                ) and self._clears_signal(unit, stmt.value):
                    return "zero", stmt
                if called in vocab.SANITIZERS and self._cleans_signal(unit, stmt.value):
                    return "replace", stmt  # ``value.nan_to_num_()``: NZ101's, reported once
                helper = self.facts.helper_name(stmt.value.func)
                if helper is not None and self._helper_zeroes(helper):
                    return "zero", stmt
            if isinstance(stmt, ast.Return):
                if loops and _reports_status(stmt.value) and not _is_step(unit.node):
                    return None  # ``return False, step`` out of the batch loop: a stop
                if loops and self._returns_from_training(unit, stmt):
                    return None  # the training function ends: a halt, as a raise would be
                return self._return_kind(unit, stmt, tested)
            if isinstance(stmt, ast.Break) and loops and _sets_a_flag(branch, stmt):
                return None  # ``valid = False; break``: the search ends, the flag decides
            if isinstance(stmt, ast.Break) and self._raised_after(unit, branch, stmt):
                return None  # ``error = "loss is nan"; break`` ... ``raise RuntimeError(error)``
            if isinstance(stmt, ast.Break) and loops and self._break_is_no_skip(unit, stmt, tested):
                return None  # the loop is left for good: the code after it decides
            if isinstance(stmt, ast.Continue | ast.Break) and inner:
                continue
            if isinstance(stmt, ast.Continue | ast.Break) and loops:
                return ("late_skip" if self._after_the_update(unit, stmt) else "skip"), stmt
            if isinstance(stmt, ast.Pass) and len(branch) == 1 and (loops or unit.updates_after):
                return "skip", stmt
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and self._cleans_tested(
                unit, stmt.value, tested
            ):
                return "replace", stmt  # ``p.grad = where(isnan(p.grad), 0, p.grad)``: once
            if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign):
                kind = self._assign_kind(unit, stmt, tested)
                if kind:
                    return kind, stmt
            if isinstance(stmt, ast.If) and _strong(self.flag_of(unit, stmt.test)) is None:
                outcomes = [
                    self._branch(unit, sub, tested, loops, owner, inner)
                    for sub in (stmt.body, stmt.orelse)
                ]
                for outcome in outcomes:
                    if outcome is not None and outcome[0] != "go_on":
                        return outcome
                if all(o is None for o in outcomes) and stmt.orelse:
                    return None
            if isinstance(stmt, ast.For | ast.While | ast.With):
                looped = inner or not isinstance(stmt, ast.With)
                outcome = self._branch(unit, stmt.body, tested, loops, owner, looped)
                if outcome is None:
                    return None
                if outcome[0] != "go_on":
                    return outcome
        marked = _marks_a_skip(branch)
        if marked is not None:
            return "skip_flag", marked  # ``self.skip_next_update = True``: others skip on it
        if any(isinstance(s, ast.Assign) and _constant_truth(s.value) is not None for s in branch):
            return None  # a flag is set: the reaction to it comes later
        return "go_on", owner

    @staticmethod
    def _after_the_update(unit: _Unit, stmt: ast.stmt) -> bool:
        """Is ``stmt`` (a ``continue``) after its loop's optimizer step, with none after
        it? The update is applied by then: what it leaves is the rest of the iteration."""
        loops = [
            node
            for node in ast.walk(unit.node)
            if isinstance(node, _LOOPS)
            and node.lineno < stmt.lineno <= (node.end_lineno or node.lineno)
        ]
        if not loops or not unit.updates_after:
            return False
        loop = max(loops, key=lambda node: node.lineno)
        steps = [line for line in unit.updates_after if loop.lineno <= line <= loop.end_lineno]
        return bool(steps) and all(line < stmt.lineno for line in steps)

    def _return_kind(
        self, unit: _Unit, stmt: ast.Return, tested: set[str]
    ) -> tuple[str, ast.AST] | None:
        value = stmt.value
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            # in code that trains, leaving is skipping the step; a helper that hands back
            # None marks the value missing, and what computes with it fails loudly
            return ("skip", stmt) if unit.trains else None
        if any(line > stmt.lineno for line in unit.updates_after):
            return "skip", stmt  # the optimizer step below is not taken
        if _constants(value) and _is_step(unit.node):
            return "skip", stmt  # ``def step(self): ... return False, None, None``: not taken
        if isinstance(value, ast.Constant):
            return None  # ``return True``: a predicate, its caller decides
        elements = value.elts if isinstance(value, ast.Tuple) else [value]
        if any(self.flag_of(unit, element) is not None for element in elements):
            # handing the flag back (``return total_norm, ratio, is_finite``): the caller
            # decides; a skip only when the step it guards is not taken here, or when the
            # step itself leaves (an optimizer's ``step`` returning mid-update)
            later = [line for line in unit.updates_after if line > stmt.lineno]
            return ("skip", stmt) if later or _is_step(unit.node) else None
        if any(map(self.facts.is_nonfinite_constant, elements)):
            return None  # ``return torch.tensor(float("nan"))``: the NaN is handed on
        if isinstance(value, ast.Call):
            return "skip", stmt
        parameters = (
            parameter_names(unit.node)
            if isinstance(unit.node, ast.FunctionDef | ast.AsyncFunctionDef)
            else set()
        )
        for element in elements:
            names = _names(element)
            if names & parameters or (
                self.facts.is_signal(element, unit.scope) and not names <= tested
            ):
                return "skip", stmt  # the old state goes back
        return None  # the tested values handed back: a search

    def _assign_kind(
        self, unit: _Unit, stmt: ast.Assign | ast.AugAssign | ast.AnnAssign, tested: set[str]
    ) -> str | None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == "grad" and _none(value):
                return "zero"
            if isinstance(value, ast.Call) and self._called(value) in sources.ZEROING_CALLS:
                if self.facts.is_signal(target, unit.scope):
                    # zeroed gradients or loss take no step; a model's output set to
                    # zeros is used as if the model had made it; ``zeros = zeros_like(g)``
                    # only makes the value a select puts in
                    dotted = dotted_name(target) or ""
                    named = dotted.rsplit(".", 1)[-1]
                    if vocab.names_gradients(named):
                        return "zero"
                    if vocab.is_signal_name(named):
                        return "zero_value"  # ``loss = zeros_like(loss)``
                    if dotted.removeprefix("self.") in tested or any(
                        dotted == dotted_name(arg) for arg in value.args[:1]
                    ):
                        return "replace"
                    continue
            key = _key(target)
            if key is None:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                continue  # a flag being set
            if value is not None and self.facts.is_nonfinite_constant(value):
                continue  # ``decrease_error = inf``: still not finite
            if _none(value):
                if self._none_checked_after(unit, key, stmt.lineno) and (
                    key.removeprefix("self.") in tested
                ):
                    return "replace"  # ``prior_loss = None`` ... ``if prior_loss is not None``
                continue  # ``final_loss = None``: marked missing (what uses it fails loudly)
            if vocab.is_metric_name(key.rsplit(".", 1)[-1]):
                continue  # ``f1_score = -1``: a metric reports a NaN as a marker
            if value is not None and self._sentinel(unit, value):
                return "sentinel"  # a marker the overflow check reads (``norm = -1``)
            if key in unit.env or self.flag_of(unit, value or target) is not None:
                continue
            base = key.removeprefix("self.")
            if base in tested or (
                vocab.is_signal_name(base.rsplit(".", 1)[-1]) and "loss" in base.lower()
            ):
                if isinstance(value, ast.Subscript) and _key(value.value) == key:
                    return "drop"  # ``losses = losses[finite]``: the bad samples leave
                return "replace"
        return None

    def _add(self, unit: _Unit, kind: str, node: ast.AST, route: Route) -> bool:
        """Record a reaction; False when it is no reaction at all (a flag known by name
        only, in code that does not train)."""
        if route.by_name and not unit.trains:
            return False  # an ``overflow`` of a buffer, a counter: nothing here trains
        if self._collect:
            return True
        where = getattr(unit.node, "lineno", 0)
        if self.facts.only_observes(where) or self.facts.in_test(where):
            return True  # evaluation, metrics, plots and tests touch no training signal
        line = getattr(node, "lineno", 1)
        if self._in_evaluation_loop(unit, line):
            return True
        col = getattr(node, "col_offset", 0)
        last = getattr(node, "end_lineno", line) or line
        if isinstance(node, ast.If | ast.ExceptHandler | ast.For | ast.While):
            last = line
        key = (line, col, kind)
        scaling = kind not in _NOT_SCALING and (
            route.scaling or unit.scaling or kind in _FORCED_SCALING
        )
        if key not in self._reactions:
            self._reactions[key] = Reaction(kind, line, col, line, last, route, scaling)
        return True

    # ---- selections, dropped samples, inside one statement ------------------------
    def _expressions(self, unit: _Unit, stmt: ast.stmt, in_bad_branch: bool = False) -> None:
        """Selects that keep old state and boolean indexing that drops samples, anywhere
        in the statement's own expressions (nested blocks are read as statements). In a
        branch taken on a non-finite value, the branch's first reaction is the site's one
        finding: the samples it drops are not reported again statement by statement."""
        extra: set[str] = set()
        subscript = isinstance(stmt, ast.Assign | ast.AnnAssign) and isinstance(
            stmt.value, ast.Subscript
        )
        if subscript and not in_bad_branch and (unit.trains or self._hands_back(unit, stmt)):
            self._drop(unit, stmt, stmt.value, extra)  # ``losses = losses[finite]``
        for node in _statement_expressions(stmt):
            if isinstance(node, ast.Call):
                called = self._called(node)
                if called in vocab.MAPPERS and node.args:
                    if any(self._signal(unit, a, extra) for a in node.args[1:]):
                        for arg in node.args[:1]:
                            if isinstance(arg, ast.Lambda):
                                extra |= parameter_names(arg)
                self._select(unit, stmt, node, called, extra)
                if called == "step" and isinstance(node.func, ast.Attribute):
                    owner = dotted_name(node.func.value) or ""
                    if "scaler" in vocab.name_words(owner.rsplit(".", 1)[-1]):
                        route = Route(node.lineno, f"{owner}.step()", None, True)
                        self._add(unit, "scaler_step", stmt, route)
                if called == vocab.APEX_SCALE_LOSS and self._from_apex(node.func):
                    # the patched ``optimizer.step`` skips the step when this overflows
                    shown = dotted_name(node.func) or vocab.APEX_SCALE_LOSS
                    route = Route(node.lineno, f"{shown}()", None, True)
                    self._add(unit, "apex_scale", stmt, route)
                if called in vocab.MASKED_FILL and len(node.args) >= 2:
                    found = self.flag_of(unit, node.args[-2], extra)
                    if (
                        found
                        and self._sentinel(unit, node.args[-1])
                        and self._fills_what_it_tested(unit, node, found[0], extra)
                    ):
                        self._add(unit, "sentinel", stmt, found[0])
                if called in _REDUCTIONS:
                    receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
                    for subject in [*receiver, *node.args[:1]]:
                        self._drop(unit, stmt, subject, extra)
                    if called in vocab.NAN_REDUCTIONS:
                        self._nan_reduction(unit, stmt, node, [*receiver, *node.args[:1]])
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                # ``bad * err + (~bad) * norm`` with ``err = tensor(-1.0)``
                for one, other in ((node.left, node.right), (node.right, node.left)):
                    found = self.flag_of(unit, one, extra)
                    if found and found[1] and self._sentinel(unit, other):
                        self._add(unit, "sentinel", stmt, found[0])
            elif isinstance(node, ast.IfExp):
                found = _strong(self.flag_of(unit, node.test, extra))
                branches = (node.body, node.orelse)
                if found and _passes_through(found, node.test, node.body, node.orelse):
                    continue
                # a constant is NZ103's; None is no old state: it marks the value missing,
                # and anything that computes with it fails loudly
                if found and not any(self.facts.is_constant(b) or _none(b) for b in branches):
                    if self._signal(unit, node.body, extra) or self._signal(
                        unit, node.orelse, extra
                    ):
                        self._keep(unit, stmt, found)

    def _nan_reduction(
        self, unit: _Unit, stmt: ast.stmt, call: ast.Call, subjects: list[ast.expr]
    ) -> None:
        """``loss = losses.nanmean()`` in code that trains (or a loss function handing the
        loss back): a NaN sample leaves the loss with no test at all. Only losses count:
        a NaN-ignoring metric (``errp = nanmean(pred / y)``) is the logs' business."""
        if (self.facts.qualified(call.func) or "").startswith("numpy."):
            return  # NumPy's arrays carry no gradient: an error measure, not the loss
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign | ast.AugAssign):
            targets = [stmt.target]
        hands_back = isinstance(stmt, ast.Assign | ast.AnnAssign) and self._hands_back(unit, stmt)
        if not (unit.trains or hands_back or isinstance(stmt, ast.Return)):
            return
        named = [dotted_name(n) or "" for n in [*targets, *subjects]]
        if not any(vocab.is_loss_name(name.rsplit(".", 1)[-1]) for name in named):
            return
        # ``losses.nanmean()`` or ``jnp.nanmean(losses)``: a module is never signal
        if any(self.facts.is_signal(subject, unit.scope) for subject in subjects):
            shown = dotted_name(call.func) or self._called(call)
            self._add(unit, "nan_drop", stmt, Route(call.lineno, f"{shown}()", None, False))

    def _hands_back(self, unit: _Unit, stmt: ast.Assign | ast.AnnAssign) -> bool:
        """Does the function return what ``stmt`` binds (a loss for the caller's step),
        rather than keep it to itself (an analysis of finished trials)?"""
        if unit.returned is None:
            unit.returned = {
                name
                for node in self.facts.nodes(unit.node)
                if isinstance(node, ast.Return) and node.value is not None
                for name in _names(node.value)
            }
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return any(unit.returned & bound_names(target) for target in targets)

    def _fills_what_it_tested(
        self, unit: _Unit, call: ast.Call, route: Route, extra: set[str]
    ) -> bool:
        """``norm.masked_fill_(isinf(norm), -1)`` marks the tested value (or training
        signal); ``indices.masked_fill(scores == -inf, -1)`` marks other values where
        the scores were masked out, which hides nothing."""
        method = isinstance(call.func, ast.Attribute) and len(call.args) == 2
        filled = call.func.value if method else call.args[0]  # type: ignore[union-attr]
        return self._is_tested(filled, route, call.args[-2]) or self._signal(unit, filled, extra)

    def _is_tested(self, value: ast.expr, route: Route, test: ast.expr) -> bool:
        """Is ``value`` (a name) the value the test looked at?"""
        name = (dotted_name(value) or "").removeprefix("self.")
        return bool(name) and (name in _names(test) or vocab.has_word(route.origin, name))

    def _drop(self, unit: _Unit, stmt: ast.stmt, subject: ast.expr, extra: set[str]) -> None:
        """``losses[isfinite(losses)].mean()``: the non-finite samples leave the mean."""
        if not (isinstance(subject, ast.Subscript) and isinstance(subject.ctx, ast.Load)):
            return
        found = _strong(self.flag_of(unit, subject.slice, extra))
        if found and not found[1] and self._signal(unit, subject.value, extra):
            self._add(unit, "drop", stmt, found[0])

    def _select(
        self, unit: _Unit, stmt: ast.stmt, call: ast.Call, called: str, extra: set[str]
    ) -> None:
        args = list(call.args)
        if (
            called == "partial"
            and len(args) >= 2
            and (last_part(self.facts.qualified(args[0]) or "") in _SELECT_CALLS)
        ):
            found = self.flag_of(unit, args[1], extra)
            if found:
                self._keep(unit, stmt, found)
            return
        if called not in _SELECT_CALLS or len(args) < 2:
            return
        found = self.flag_of(unit, args[0], extra)
        if not found:
            return
        branches = args[1:3]
        if any(self.facts.is_nonfinite_constant(b) for b in branches):
            return  # ``where(isfinite(x), x, -inf)``: what stands in is not finite either
        if len(branches) == 2 and _passes_through(found, args[0], branches[0], branches[1]):
            return
        if found[0].weak and not any(
            self._signal(unit, b, extra) or self._finfo(unit, b) or self._sentinel(unit, b)
            for b in branches
        ):
            return
        if any(self._sentinel(unit, b) for b in branches):
            # a marker the overflow check reads, in place of the tested value (a weak
            # test's marker elsewhere, ``where(all(isnan(x)), -1, argmax(x))``, hides none)
            if not found[0].weak or any(self._is_tested(b, found[0], args[0]) for b in branches):
                self._add(unit, "sentinel", stmt, found[0])
            return
        if found[0].weak and any(self._finfo(unit, b) for b in branches):
            self._add(unit, "clamp", stmt, found[0])  # ``where(isinf(h).any(), max - 1000, max)``
            return
        if called in ("cond", "switch") and all(self._only_reports(b) for b in branches):
            return  # ``cond(any(~isfinite(g)), lambda: debug.print(...), lambda: None)``
        if called in ("cond", "switch") and any(self._recomputes(b) for b in branches):
            return  # the non-finite branch computes the value again: nothing is kept
        if called in ("cond", "switch") and any(self._zeroes(b) for b in branches):
            self._add(unit, "zero", stmt, found[0])
            return
        if not found[0].weak and any(self._named_fill(unit, b) for b in branches):
            self._add(unit, "replace", stmt, found[0])  # ``where(isnan(g), zeros, g)``
            return
        if any(self.facts.is_constant(b) for b in branches):
            # A plain constant fill is NZ103's concern, but NZ103 cannot follow a flag
            # handed back in a tuple (``grads, valid_step = self.scale_gradients(g)``),
            # nor loss scaling's own fills: those are the flow's to report.
            route = found[0]
            if route.weak:
                return
            if route.scaling or unit.scaling or _names(args[0]) & extra or route.in_tuple:
                kept = [b for b in branches if not self.facts.is_constant(b)]
                if route.scaling or unit.scaling or any(self._signal(unit, b, extra) for b in kept):
                    self._add(unit, "replace", stmt, route)
            return
        self._keep(unit, stmt, found)

    def _in_evaluation_loop(self, unit: _Unit, line: int) -> bool:
        """Is ``line`` in a loop over evaluation data (``for batch in val_loader``) that
        takes no step: a validation pass inside the training function."""
        return any(
            isinstance(node, ast.For | ast.AsyncFor)
            and _within(node, line)
            and any(vocab.names_evaluation(name) for name in _names(node.iter))
            and not any(map(self._is_update, ast.walk(node)))
            for node in self.facts.nodes(unit.node)
        )

    def _none_checked_after(self, unit: _Unit, key: str, line: int) -> bool:
        """Does the code below ``line`` ask whether ``key`` is None (and so go on
        without the value it was to hold)?"""
        return any(
            isinstance(node, ast.Compare)
            and node.lineno > line
            and isinstance(node.ops[0], ast.Is | ast.IsNot)
            and dotted_name(node.left) == key
            and _none(node.comparators[0])
            for node in self.facts.nodes(unit.node)
        )

    def _named_fill(self, unit: _Unit, value: ast.expr) -> bool:
        """A name the function binds only to constant fills (``zeros = zeros_like(g)``)."""
        if not isinstance(value, ast.Name) or not isinstance(unit.node, FunctionNode):
            return False
        bound = [v for names, v in self.facts.bindings(unit.node) if value.id in names]
        return bool(bound) and all(self.facts.is_finite_constant(v) for v in bound)

    def _keep(self, unit: _Unit, stmt: ast.stmt, found: Flag) -> None:
        route = found[0]
        if not (route.scaling or unit.scaling) and self._recorded(unit, route):
            return
        self._add(unit, "keep", stmt, route)

    def _recorded(self, unit: _Unit, route: Route) -> bool:
        """Is the flag kept for a raise: returned, stored, passed on (not just logged),
        or raised on in this function?"""
        if unit.node is self.facts.tree or not isinstance(unit.node, ast.AST):
            return False
        names = {route.flag} if route.flag else set()
        if not names:
            return False
        for node in self.facts.nodes(unit.node):
            if isinstance(node, ast.If | ast.Assert) and names & _names(node.test):
                body = node.body if isinstance(node, ast.If) else []
                if isinstance(node, ast.Assert) or any(isinstance(s, ast.Raise) for s in body):
                    return True
        return self.facts.records_names(unit.node, names, unit.scope)

    def _only_reports(self, branch: ast.expr) -> bool:
        """A cond branch that does nothing but print or log (or nothing at all)."""
        if not isinstance(branch, ast.Lambda):
            return False
        body = branch.body
        if isinstance(body, ast.Constant) and body.value is None:
            return True
        return isinstance(body, ast.Call) and self._called(body) in vocab.OBSERVING_CALLS

    def _recomputes(self, branch: ast.expr) -> bool:
        """A cond branch that computes gradients anew (``jax.value_and_grad(f)(p)``)."""
        return isinstance(branch, ast.Lambda) and any(
            isinstance(n, ast.Call) and self._called(n) in vocab.GRAD_TRANSFORMS
            for n in ast.walk(branch.body)
        )

    def _zeroes(self, branch: ast.expr) -> bool:
        """A cond branch that returns zeros (a lambda or a same-file function)."""
        bodies: list[ast.expr] = []
        if isinstance(branch, ast.Lambda):
            bodies.append(branch.body)
        elif isinstance(branch, ast.Name):
            for fn in self.facts.functions_named(branch.id):
                bodies += [
                    n.value
                    for n in ast.walk(fn)
                    if isinstance(n, ast.Return) and n.value is not None
                ]
        for body in bodies:
            for node in ast.walk(body):
                if isinstance(node, ast.Call) and self._called(node) == "zeros_like":
                    return True
                if isinstance(node, ast.Name | ast.Attribute) and (
                    last_part(self.facts.qualified(node) or "") == "zeros_like"
                ):
                    return True
        return False

    def _helper_zeroes(self, name: str) -> bool:
        """Does a same-file function clear the gradients (``zero_grad``, ``p.grad = None``)?"""
        for fn in self.facts.functions_named(name):
            for node in self.facts.nodes(fn):
                if isinstance(node, ast.Call) and self._called(node) in ("zero_grad", "zero_"):
                    return True
                if (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in node.targets)
                    and _none(node.value)
                ):
                    return True
        return False

    def _finfo(self, unit: _Unit, node: ast.expr) -> bool:
        """A bound of the floating-point range, or a name bound to one in the function."""
        if _mentions_finfo(node):
            return True
        if isinstance(unit.node, ast.FunctionDef):
            names = _names(node)
            return any(
                names & bound and _mentions_finfo(value)
                for bound, value in self.facts.bindings(unit.node)
            )
        return False

    def _sentinel(self, unit: _Unit, node: ast.expr) -> bool:
        """A negative constant (``-1``), or a name bound to one (``torch.tensor(-1.0)``)."""
        if _negative(node):
            return True
        if isinstance(node, ast.Name) and isinstance(unit.node, ast.FunctionDef):
            for names, value in self.facts.bindings(unit.node):
                if node.id in names and isinstance(value, ast.Call) and value.args:
                    return _negative(value.args[0])
        return False

    # ---- what an expression says about finiteness --------------------------------
    def flag_of(self, unit: _Unit, expr: ast.expr, extra: set[str] | None = None) -> Flag | None:
        extra = extra or set()
        if isinstance(expr, ast.Name | ast.Attribute):
            key = dotted_name(expr)
            if key and key in unit.env:
                return unit.env[key]
            if isinstance(expr, ast.Attribute) and expr.attr in sources.BAD_FLAG_NAMES:
                scaler = unit.scaling or expr.attr in SKIP_REPORTS or _optimizer_report(expr)
                route = Route(expr.lineno, _short(self.text, expr), None, scaler, by_name=True)
                return route, True
            if isinstance(expr, ast.Attribute) and expr.attr in ("any", "all"):
                return self.flag_of(unit, expr.value, extra)
            return None
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not | ast.Invert):
            found = self.flag_of(unit, expr.operand, extra)
            return (found[0], not found[1]) if found else None
        if isinstance(expr, ast.BoolOp) or (
            isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitAnd | ast.BitOr)
        ):
            parts = expr.values if isinstance(expr, ast.BoolOp) else [expr.left, expr.right]
            flags = [f for f in (self.flag_of(unit, part, extra) for part in parts) if f]
            pool = [f for f in flags if not f[0].weak] or flags
            if not pool:
                return None
            both = isinstance(expr.op, ast.And | ast.BitAnd)
            # ``not actor_overflow and critic_overflow`` holds only when the critic's
            # values are not finite: a part true on a non-finite value decides a conjunction
            return next((f for f in pool if f[1]), pool[0]) if both else pool[0]
        if isinstance(expr, ast.Compare):
            return self._compare(unit, expr, extra)
        if isinstance(expr, ast.Call):
            return self._call_flag(unit, expr, extra)
        if isinstance(expr, ast.Subscript):
            return self.flag_of(unit, expr.value, extra)
        if isinstance(expr, ast.NamedExpr):
            return self.flag_of(unit, expr.value, extra)
        if isinstance(expr, ast.GeneratorExp | ast.ListComp):
            return self.flag_of(unit, expr.elt, extra)
        if isinstance(expr, ast.List | ast.Tuple) and len(expr.elts) == 1:
            return self.flag_of(unit, expr.elts[0], extra)  # ``torch.tensor([found_inf])``
        return None

    def _compare(self, unit: _Unit, expr: ast.Compare, extra: set[str]) -> Flag | None:
        left, op, right = expr.left, expr.ops[0], expr.comparators[0]
        if len(expr.ops) != 1:
            return None
        itself = self_comparable(left) and ast.dump(left) == ast.dump(right)
        if isinstance(op, ast.NotEq) and itself:
            if vocab.self_comparisons(source_segment(self.text, expr)) and self._signal(
                unit, left, extra
            ):
                return self._route(expr, f"{_short(self.text, left)} != itself"), True
            return None
        for side, other in ((left, right), (right, left)):
            if _is_inf(side) and self._marked_with_inf(unit, other):
                return None  # ``grads_mag[i] = float("inf")`` ... ``== inf``: a marker read
            if _is_inf(side) and isinstance(op, ast.Eq | ast.NotEq | ast.Is):
                route = self._route(expr, f"{_short(self.text, other)} == inf")
                if not self._signal(unit, other, extra):
                    route = dataclasses.replace(route, weak=True)
                return route, isinstance(op, ast.Eq | ast.Is)
        if (
            isinstance(op, ast.In | ast.NotIn)
            and isinstance(left, ast.Constant)
            and isinstance(left.value, bool)
        ):  # ``True in torch.isnan(p.grad)``: some element tests true
            found = self.flag_of(unit, right, extra)
            if found is None:
                return None
            holds = found[1] == left.value
            return found[0], holds if isinstance(op, ast.In) else not holds
        if isinstance(right, ast.Constant) and right.value is None:
            return None  # ``flag is None`` asks whether it was set, not what it holds
        found = self.flag_of(unit, left, extra)
        if found and isinstance(right, ast.Constant):
            truthy = bool(right.value)
            if isinstance(op, ast.Eq | ast.Is):
                return (found[0], found[1] == truthy)
            if isinstance(op, ast.NotEq | ast.IsNot):
                return found[0], found[1] != truthy
            # a count or a 0/1 flag against a threshold: ``found_inf.item() >= 1``
            # holds when the test was true, ``nan_count < 1`` when it was not
            threshold = right.value if isinstance(right.value, int | float) else None
            if threshold is None or isinstance(threshold, bool):
                return None
            if (isinstance(op, ast.Gt) and threshold >= 0) or (
                isinstance(op, ast.GtE) and threshold > 0
            ):
                return found
            if (isinstance(op, ast.Lt) and threshold > 0) or (
                isinstance(op, ast.LtE) and threshold >= 0
            ):
                return found[0], not found[1]
        return None

    def _call_flag(self, unit: _Unit, call: ast.Call, extra: set[str]) -> Flag | None:
        called = self._called(call)
        comparison = _COMPARISON_CALLS.get(called or "")
        if comparison is not None and len(call.args) == 2 and not call.keywords:
            # ``tf.equal(has_non_finite, 1)``, ``torch.gt(nan_count, 0)``: a comparison
            left, right = call.args
            compare = ast.Compare(left=left, ops=[comparison()], comparators=[right])
            return self._compare(unit, ast.copy_location(compare, call), extra)
        if called in sources.PREDICATE_POLARITY:
            subject = self.facts.predicate_subject(call)
            if subject is None:
                return None
            origin = f"{called}({_short(self.text, subject)})"
            route = self._route(call, origin)
            if not self._signal(unit, subject, extra):
                route = dataclasses.replace(route, weak=True)
            return route, sources.PREDICATE_POLARITY[called]
        if called in sources.OVERFLOW_HELPERS:
            return Route(call.lineno, f"{called}()", None, unit.scaling), True
        if called in sources.FINITE_HELPERS and isinstance(call.func, ast.Attribute):
            return Route(call.lineno, f"{called}()", None, unit.scaling), False
        helper = self.facts.helper_name(call.func)
        if helper is not None:
            returned = self._helper_returns(helper).get(None)
            arguments = [*call.args, *(k.value for k in call.keywords)]
            if returned and (
                returned[0].scaling
                or any(self._signal(unit, a, extra) for a in arguments)
                or not arguments
            ):
                first, line = returned[0], call.lineno
                route = Route(line, f"{helper}()", None, first.scaling, by_name=first.by_name)
                return route, returned[1]
        if called == "where" and len(call.args) == 3:  # ``where(found, ones, zeros)``
            truths = [_fill_truth(branch) for branch in call.args[1:]]
            found = self.flag_of(unit, call.args[0], extra)
            if found and None not in truths and truths[0] != truths[1]:
                return found[0], found[1] == truths[0]
        polarity = vocab.nonfinite_name_polarity(called) if helper is None else None
        if polarity is not None:  # ``has_nan_or_inf(grads)``, a helper from another file
            arguments = [*call.args, *(k.value for k in call.keywords)]
            route = self._route(call, f"{called}()")
            if not (
                vocab.is_signal_name(called) or any(self._signal(unit, a, extra) for a in arguments)
            ):
                route = dataclasses.replace(route, weak=True)
            return route, polarity
        if called in vocab.MAPPERS and len(call.args) >= 2:  # tree map of a test over signal
            mapped, trees = call.args[0], call.args[1:]
            if any(self._signal(unit, tree, extra) for tree in trees):
                if isinstance(mapped, ast.Lambda):
                    return self.flag_of(unit, mapped.body, extra | parameter_names(mapped))
                name = last_part(self.facts.qualified(mapped) or "")
                if name in sources.PREDICATE_POLARITY:
                    origin = f"{name}({_short(self.text, trees[0])})"
                    return self._route(call, origin), sources.PREDICATE_POLARITY[name]
        if called == "logical_not" and call.args:
            found = self.flag_of(unit, call.args[0], extra)
            return (found[0], not found[1]) if found else None
        if called in sources.FLAG_REDUCTIONS or called in vocab.PREDICATES:
            receiver = [call.func.value] if isinstance(call.func, ast.Attribute) else []
            for arg in [*receiver, *call.args, *(k.value for k in call.keywords)]:
                found = self.flag_of(unit, arg, extra)
                if found:
                    return found
        return None

    def _route(self, node: ast.expr, origin: str) -> Route:
        return Route(node.lineno, origin, None, False)

    def _helper_returns(self, name: str) -> dict[int | None, Flag]:
        """What a same-file function returns as flags (by tuple position, None: whole),
        reading its parameters as training signal."""
        if name in self._helper_memo:
            return self._helper_memo[name]
        imported = self.facts.imported.get(name)
        if imported is not None:  # a helper of another module: what its summary says
            tested = Route(0, f"{name}()", None, imported.scaling)
            self._helper_memo[name] = {None: (tested, imported.polarity)} if imported.tests else {}
            return self._helper_memo[name]
        self._helper_memo[name] = {}
        found: dict[int | None, Flag] = {}
        collecting, self._collect = self._collect, True
        try:
            for fn in self.facts.functions_named(name):
                unit = _Unit(
                    fn, functools.partial(self._parameter_scope, fn), {}, self._scaler_near(fn)
                )
                self._block(unit, fn.body, 0, None)
                for position, (route, polarity) in unit.returns.items():
                    # a flag handed back by code where a scaler is at work is the scaler's
                    scaling = route.scaling or unit.scaling
                    found[position] = (dataclasses.replace(route, scaling=scaling), polarity)
        finally:
            self._collect = collecting
        self._helper_memo[name] = found
        return found

    def _parameter_scope(self, fn: FunctionNode) -> Scope:
        """The function's scope with its parameters read as training signal."""
        scope = self.facts.scope(fn.lineno)
        return Scope(scope.signal | parameter_names(fn), scope.grad_functions, scope.flags)

    def _signal(self, unit: _Unit, expr: ast.expr, extra: set[str]) -> bool:
        if extra and _names(expr) & extra:
            return True
        return self.facts.is_signal(expr, unit.scope)

    def _called(self, call: ast.Call) -> str:
        return self.facts.called(call.func)

    def _from_apex(self, func: ast.expr) -> bool:
        """Is ``func`` apex's (``amp.scale_loss`` with ``from apex import amp``)?"""
        return (self.facts.qualified(func) or "").startswith("apex.")


# ---- small syntactic helpers --------------------------------------------------------
_TRAINING_WORDS = frozenset({"train", "step", "backward", "update", "updates", "optimizer"})


def _names_training(called: str) -> bool:
    """Is a call named for training (``train_step``, ``optimizer.step``, ``model.fit``)?
    ``fit`` counts as the first word only: ``curve_fit`` fits a curve, not a model."""
    words = vocab.name_words(called)
    return bool(_TRAINING_WORDS.intersection(words)) or words[:1] == ["fit"]


_NAMED_TRAINING = vocab.STEPPING_NAME_WORDS | {"loss"}
# Conversions that take a value off the autograd graph: what is summed after one
# (``avg_loss += float(loss) / steps``) is a number for the logs, not training signal.
_DETACHING = vocab.TO_NUMBER | {"detach"}


def _tests_a_loss(tested: set[str]) -> bool:
    """Does a test look at a loss and at no gradient? A scaler at work in the same code
    skips overflowing gradients; skipping a non-finite loss is the code's own doing."""
    words = {w for name in tested for w in vocab.name_words(name.rsplit(".", 1)[-1])}
    loss = any(vocab.is_loss_name(name.rsplit(".", 1)[-1]) for name in tested)
    return loss and not words & vocab.GRADIENT_WORDS


def _origin_names(route: Route) -> set[str]:
    """The names a flag's test looked at (``record_loss`` in ``isnan(record_loss)``)."""
    return set(_IDENTIFIER.findall(route.origin)) | route.looked_at if route.flag else set()


_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")


def _passes_through(found: Flag, test: ast.expr, if_true: ast.expr, if_false: ast.expr) -> bool:
    """Is the value picked on a non-finite test the tested value itself
    (``where(isfinite(t), clip(t, max=1.0), t)``)? The NaN or Inf goes on as it was:
    nothing is kept or hidden."""
    bad = if_true if found[1] else if_false
    name = dotted_name(bad)
    return name is not None and name.removeprefix("self.") in _names(test)


# Classes whose ``step`` is no optimizer step: a gradient clipper, a learning-rate
# scheduler, an average, a timer (their ``return`` skips their own work only).
_HELPER_CLASS_WORDS = frozenset(
    {"clip", "clipper", "clipping", "scheduler", "sched", "ema", "averager", "timer", "meter"}
)
_REDUCTIONS = frozenset({"mean", "sum", "nanmean", "nansum", "reduce_mean", "reduce_sum"})


# What steps or scales training when one of its methods is called (``optimizer.step()``).
_TRAINING_RECEIVERS = frozenset(
    {"optimizer", "optim", "opt", "scaler", "trainer", "model", "engine", "accelerator"}
)


def _trains_by_itself(called: str, func: ast.expr) -> bool:
    """A call that is training whatever its arguments: ``backward``, ``train_step``,
    ``fit``, or a step or update of an optimizer, a scaler, a model or an engine."""
    words = vocab.name_words(called)
    if {"train", "backward"}.intersection(words) or words[:1] == ["fit"]:
        return True
    receiver = dotted_name(func.value) if isinstance(func, ast.Attribute) else None
    owner = (receiver or "").rsplit(".", 1)[-1]
    return bool(_TRAINING_RECEIVERS.intersection(vocab.name_words(owner)))


def _optimizer_report(expr: ast.Attribute) -> bool:
    """``model.optimizer.overflow``: what an fp16 optimizer (DeepSpeed's, Megatron's)
    reports of the step its loss scaler skipped; reading it is the scaler's business."""
    owner = (dotted_name(expr.value) or "").rsplit(".", 1)[-1]
    return expr.attr == "overflow" and "optimizer" in vocab.name_words(owner)


def _base_name(node: ast.expr) -> str | None:
    """``grads_mag`` for ``grads_mag[i]``, ``self.best`` for ``self.best``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return dotted_name(node)


def _constants(value: ast.expr) -> bool:
    """``False``, ``(False, None, None)``: a status, not a value computed here."""
    elements = value.elts if isinstance(value, ast.Tuple) else [value]
    return bool(elements) and all(isinstance(e, ast.Constant) for e in elements)


def _reports_status(value: ast.expr | None) -> bool:
    """``False`` or ``(False, step)``: a success flag handed to the caller."""
    elements = value.elts if isinstance(value, ast.Tuple) else [value]
    return any(isinstance(e, ast.Constant) and isinstance(e.value, bool) for e in elements)


# The identity matrix, put in place of a non-finite one (``torch.eye(n)``).
_IDENTITIES = frozenset({"eye", "identity", "eye_like"})
# Base classes of a model's layers (``nn.Module``, ``eqx.Module``, ``keras.layers.Layer``).
_MODEL_BASES = frozenset({"Module", "Layer", "Model", "LightningModule"})


def _is_model_class(cls: ast.ClassDef) -> bool:
    return any(last_part(dotted_name(base) or "") in _MODEL_BASES for base in cls.bases)


# Array libraries' comparisons as calls (``tf.equal``, ``torch.gt``, ``jnp.greater``).
_COMPARISON_CALLS: dict[str, type[ast.cmpop]] = {
    "equal": ast.Eq,
    "eq": ast.Eq,
    "not_equal": ast.NotEq,
    "ne": ast.NotEq,
    "greater": ast.Gt,
    "gt": ast.Gt,
    "greater_equal": ast.GtE,
    "ge": ast.GtE,
    "less": ast.Lt,
    "lt": ast.Lt,
    "less_equal": ast.LtE,
    "le": ast.LtE,
}


def _steps_through_a_scaler(call: ast.Call) -> bool:
    """``loss_scaler(loss, optimizer, clip_grad=...)``: calling a loss scaler object with
    the optimizer (timm's ``NativeScaler``, copied by MAE, DeiT, BEiT...) runs the
    backward pass and the optimizer's step."""
    words = vocab.name_words(last_part(dotted_name(call.func) or ""))
    if words[-1:] != ["scaler"]:
        return False
    given = [*call.args, *(k.value for k in call.keywords)]
    return any(vocab.names_optimizer(dotted_name(v) or "") for v in given)


def _is_step(node: ast.AST) -> bool:
    """A function named for an optimizer step (``step``, ``optimizer_step``)."""
    name = getattr(node, "name", "")
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "step" in (
        vocab.name_words(name)
    )


def _line_range(node: ast.AST) -> tuple[int, int]:
    """First and last line of a definition, its decorators included."""
    lines = [d.lineno for d in getattr(node, "decorator_list", [])]
    first = min([*lines, node.lineno])  # type: ignore[attr-defined]
    return first, node.end_lineno or node.lineno  # type: ignore[attr-defined]


def _zero_or_one(value: ast.expr | None) -> bool | None:
    """The truth of a constant ``0``, ``1``, ``0.0``, ``1.0``, ``False`` or ``True``."""
    if isinstance(value, ast.Constant) and type(value.value) in (bool, int, float):
        return bool(value.value) if value.value in (0, 1) else None
    return None


def _fill_truth(value: ast.expr) -> bool | None:
    """True for ``ones_like(x)`` or ``1``, False for ``zeros_like(x)`` or ``0``."""
    if isinstance(value, ast.Call):
        called = last_part(dotted_name(value.func) or "")
        return {"ones_like": True, "ones": True, "zeros_like": False, "zeros": False}.get(called)
    return _zero_or_one(value)


def _constant_truth(value: ast.expr | None) -> bool | None:
    """The truth of a flag value written as a constant: ``True``, or a 0/1 flag made a
    tensor to be all-reduced (``torch.tensor([1.0], device=...)``); None for others."""
    if isinstance(value, ast.Call) and last_part(dotted_name(value.func) or "") in (
        "tensor",
        "as_tensor",
        "array",
    ):
        inner = value.args[0] if value.args else None
        if isinstance(inner, ast.List | ast.Tuple) and len(inner.elts) == 1:
            inner = inner.elts[0]
        return _zero_or_one(inner)
    if isinstance(value, ast.Constant) and isinstance(value.value, bool):
        return value.value
    return None


def _added_to_itself(stmt: ast.stmt) -> ast.expr | None:
    """What ``total = total + value`` or ``total = cat((total, value))`` adds
    (``value``), else None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    total = dotted_name(stmt.targets[0])
    value = stmt.value
    if (
        isinstance(value, ast.Call)
        and last_part(dotted_name(value.func) or "") in _JOINS
        and value.args
        and isinstance(value.args[0], ast.Tuple | ast.List)
    ):
        parts = value.args[0].elts
        others = [part for part in parts if dotted_name(part) != total]
        return others[0] if total and len(others) == 1 and len(parts) == 2 else None
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
        return None
    left, right = value.left, value.right
    if total and dotted_name(left) == total:
        return right
    if total and dotted_name(right) == total:
        return left
    return None


def _within(node: ast.AST, line: int) -> bool:
    first, last = _line_range(node)
    return first <= line <= last


def _any_within(sorted_lines: list[int], first: int, last: int) -> bool:
    at = bisect_left(sorted_lines, first)
    return at < len(sorted_lines) and sorted_lines[at] <= last


def _strong(found: Flag | None) -> Flag | None:
    """A flag about training signal (a test of an unknown value is weak)."""
    return found if found is not None and not found[0].weak else None


def _mentions_finfo(node: ast.expr) -> bool:
    """``torch.finfo(h.dtype).max - 1000``: the top of the floating-point range, where an
    fp16 clamp puts overflowed activations (``finfo.min`` alone stands in for a masked
    ``-inf``: masking, not clamping)."""
    return any(
        isinstance(n, ast.Attribute)
        and n.attr == "max"
        and isinstance(n.value, ast.Call)
        and getattr(n.value.func, "attr", getattr(n.value.func, "id", "")) == "finfo"
        for n in ast.walk(node)
    )


def _negative(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
    )


# Words without which no function holds a finiteness fact of its own.
_SOURCE_WORDS = frozenset(vocab.PREDICATES | vocab.FLOW_WORDS)


def _child_statements(node: ast.AST):
    if not isinstance(node, _BLOCKS):
        return
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, name, ()):
            if isinstance(child, ast.excepthandler | ast.match_case):
                yield child
            elif isinstance(child, ast.stmt):
                yield child


def _statements(tree: ast.AST):
    """Every statement of the file, classes' and functions' included."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in _child_statements(node):
            yield child
            stack.append(child)


def _marks_a_skip(branch: list[ast.stmt]) -> ast.Assign | None:
    """``self.skip_next_update = True``: an attribute of its own named for skipping, set
    in the branch, asks the code that reads it (another method, a framework's loop) to
    skip the step. A local flag is left to the code below it or to the caller it is
    handed to; another object's switch (``self.critic.optimizer.skip_step = True``, an
    fp16 optimizer's) to that object."""
    for stmt in branch:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            for target in stmt.targets:
                key = _key(target) or ""
                if (
                    stmt.value.value is True
                    and key.count(".") == 1
                    and key.startswith("self.")
                    and "skip" in vocab.name_words(key.rsplit(".", 1)[-1])
                ):
                    return stmt
    return None


_NAMES = (ast.Name, ast.Attribute)


def _key(target: ast.expr) -> str | None:
    dotted = dotted_name(target)
    if dotted and (dotted.count(".") == 0 or dotted.startswith("self.")):
        return dotted
    return None


def _scaler_present(test: ast.expr) -> bool | None:
    """Does ``test`` hold when a loss scaler is in use (``self.scaler is not None``,
    ``if scaler:``, ``if args.fp16:``, ``if self.use_amp:``), or when none is (``scaler is
    None``, ``not self.scaler``)? None when it asks nothing of a scaler."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        # ``self.use_fp16 and scaler is not None``: the body needs every operand
        answers = {_scaler_present(value) for value in test.values} - {None}
        return answers.pop() if len(answers) == 1 else None
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _none(test.comparators[0]):
        present = isinstance(test.ops[0], ast.IsNot)
        test = test.left
    else:
        present = True
    name = dotted_name(test) or ""
    if not _AMP_SWITCH_WORDS.intersection(vocab.name_words(name.rsplit(".", 1)[-1])):
        return None
    return present != negated


def _names_a_scaler(node: ast.AST) -> bool:
    """Is ``node`` a loss scaler object's name (``self.loss_scaler``, ``scaler``)?"""
    if isinstance(node, ast.Attribute):
        return "scaler" in vocab.name_words(node.attr)
    return isinstance(node, ast.Name) and "scaler" in vocab.name_words(node.id)


def _uses_switched_scaler(test: ast.expr, branch: list[ast.stmt]) -> bool:
    """``if grad_scaler is not None: state = grad_scaler._per_optimizer_states[...]``:
    the branch reads the scaler object its switch asked for."""
    asked = {dotted_name(n) for n in ast.walk(test) if _names_a_scaler(n)} - {None}
    return any(
        isinstance(n, ast.Attribute) and dotted_name(n.value) in asked for n in _walk(branch)
    )


def _walk(statements: list[ast.stmt]) -> list[ast.AST]:
    return [node for stmt in statements for node in ast.walk(stmt)]


def _outside_amp_switches(nodes: list[ast.AST]) -> Iterator[ast.AST]:
    """``nodes`` (a walk) but those on the scaler's side of an AMP switch (``if
    self.use_amp: scaler.step(opt) else: opt.step()``, ``scaler.get_scale() if scaler
    else 1.0``), the switch's own test, and type annotations (``scaler:
    Optional[GradScaler]`` names a type): a scaler used only there leaves the rest of the
    code, and a check in it, the code's own."""
    switched: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.arg) and node.annotation is not None:
            switched.update(id(n) for n in ast.walk(node.annotation))
        if isinstance(node, ast.If | ast.IfExp):
            present = _scaler_present(node.test)
            if present is not None:
                side = node.body if present else node.orelse
                for part in [node.test, *(side if isinstance(side, list) else [side])]:
                    switched.update(id(n) for n in ast.walk(part))
    return (n for n in nodes if id(n) not in switched)


# Words of a name that switches loss scaling on (``self.scaler``, ``use_amp``, ``fp16``).
_AMP_SWITCH_WORDS = frozenset({"scaler", "amp", "fp16"})


def _named_flag(key: str | None, line: int, origin: str, scaler: bool) -> Flag | None:
    """A flag named for what it holds, bound from an opaque call or lookup
    (``found_inf = ...``); its name says nothing of loss scaling: ``scaler`` does."""
    if not key:
        return None
    base = key.rsplit(".", 1)[-1]
    if base in sources.BAD_FLAG_NAMES:
        return Route(line, origin, base, scaler, by_name=True), True
    if base in sources.GOOD_FLAG_NAMES:
        return Route(line, origin, base, scaler, by_name=True), False
    polarity = vocab.nonfinite_name_polarity(base)  # ``found_inf_flag = ...``
    if polarity is not None:
        return Route(line, origin, base, scaler, by_name=True), polarity
    return None


def _names(node: ast.AST) -> set[str]:
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            found.add(child.id)
        elif isinstance(child, ast.Attribute):
            dotted = dotted_name(child)
            if dotted:
                found.add(dotted.removeprefix("self."))
    return found


def _is_inf(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if isinstance(node, ast.Attribute):
        return node.attr in ("inf", "Inf")
    if isinstance(node, ast.Name):
        return node.id == "inf"
    return (
        isinstance(node, ast.Call)
        and dotted_name(node.func) == "float"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and str(node.args[0].value).lower().lstrip("+-") in ("inf", "infinity")
    )


def _sets_a_flag(branch: list[ast.stmt], before: ast.stmt) -> bool:
    """Does ``branch`` set a flag to a constant before ``before``: ``valid = False``, or
    a flag tensor filled in place (``self._found_overflow.fill_(1.0)``)?"""
    for stmt in branch[: branch.index(before)]:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            if isinstance(stmt.value.value, bool):
                return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            filled = isinstance(call.func, ast.Attribute) and call.func.attr == "fill_"
            if filled and len(call.args) == 1 and isinstance(call.args[0], ast.Constant):
                return True
    return False


def _none(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _zero_arg(call: ast.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0


def _short(text: str, node: ast.expr) -> str:
    segment = " ".join(source_segment(text, node).split())
    return segment if len(segment) <= 40 else segment[:37] + "..."


def _caught(handler: ast.ExceptHandler, facts: FileFacts) -> set[str]:
    if handler.type is None:
        return set()
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {last_part(facts.qualified(t) or "") for t in types}


def _statement_expressions(stmt: ast.stmt):
    """The expressions a statement holds itself (not those of its nested blocks),
    lambdas included, outermost first."""
    roots: list[ast.AST] = []
    for name, value in ast.iter_fields(stmt):
        if name in ("body", "orelse", "finalbody", "handlers", "cases", "decorator_list"):
            continue
        if isinstance(value, ast.AST):
            roots.append(value)
        elif isinstance(value, list):
            roots.extend(v for v in value if isinstance(v, ast.AST))
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        if isinstance(node, _DEFS):
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
