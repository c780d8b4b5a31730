"""Reactions: what the code does where a finiteness fact says "non-finite".

Given a test's flag, these methods tell which reaction a branch makes (skip, zero the
gradients, replace, raise, keep going) and record it (``flow_record``) with its route.
They are one part of ``flows.Flows``, which mixes them in; they call its later parts
(``flow_selections``, ``flow_record``, ``flow_flags``) through ``self``, never the walk.
"""

from __future__ import annotations

import ast

from nozero.lint import vocab
from nozero.lint.facts import sources
from nozero.lint.facts.flow_helpers import (
    _constant_truth,
    _constants,
    _counts_up,
    _is_bool_constant,
    _is_step,
    _key,
    _marks_a_skip,
    _names,
    _none,
    _only_reports,
    _parameter_names,
    _reports_status,
    _returns_as_usual,
    _sets_a_flag,
    _statement_expressions,
    _statements,
    _strong,
    _within,
    _zero_arg,
    asks_to_stop,
)
from nozero.lint.facts.flow_types import (
    _LOOPS,
    _ROUND_WORDS,
    Flag,
    Route,
    _Unit,
)
from nozero.lint.facts.scopes import FunctionNode, parameter_names
from nozero.lint.imports import dotted_name, last_part
from nozero.lint.scaling import scaler_at_work, scaler_call
from nozero.lint.tables.reactions import REPORTING_CALLS, RESTORING_CALLS, ROLLBACK_CALLS

# Skips a scaler could take for its own (its step left out), unless the code passes over it.
_OWN_SKIPS = frozenset({"skip", "zero", "late_skip"})
# Expressions that work a value out (an index, a count, a comparison): returned, they hand
# back an answer, never the state a skipped update leaves.
_COMPUTED = (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.JoinedStr)


class ReactionsPart:
    """Reading a branch taken on a flag, and recording the reaction it makes."""

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
        if kind == "go_on" and route.implicit:
            return False  # ``if loss < limit: ... else: log(...)``: no finiteness check
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
            if _only_reports([s for s in branch if not self._leaves_as_usual(unit, s)]):
                kind = "log_only"  # a diagnostic: its own opt-in rule (NZ203)
        own = kind in _OWN_SKIPS and self._passes_over_the_scaler(unit, route, branch, node)
        if kind not in ("go_on", "log_only", "skip_flag") and not self._collect:
            self._reacted_branches.append((branch[0].lineno, branch[-1].end_lineno or 0))
        return self._add(unit, kind, node, route, own=own)

    def _passes_over_the_scaler(
        self, unit: _Unit, route: Route, branch: list[ast.stmt], node: ast.AST
    ) -> bool:
        """Where a scaler is at work, does this skip leave its step and update out
        (``if not isfinite(norm): continue`` before ``scaler.step(opt);
        scaler.update()``), touching no scale itself? The scaler never hears of the
        overflow: the skip is the code's own, in bf16 and fp32 runs too."""
        if not (route.scaling or unit.scaling) or route.by_name:
            return False
        if scaler_at_work(n for stmt in branch for n in ast.walk(stmt)):
            return False
        line = getattr(node, "lineno", 0)
        return any(
            scaler_call(call, ("step", "update")) and call.lineno > line
            for call in self.facts.nodes(unit.node)
        )

    @staticmethod
    def _leaves_as_usual(unit: _Unit, stmt: ast.stmt) -> bool:
        """An early return of what the function always hands back, with no optimizer
        step of its own passed over (an optimizer's ``step`` that leaves mid-update
        passes over the rest of the update, whatever it returns)."""
        later_steps = any(line > stmt.lineno for line in unit.updates_after)
        if later_steps or _is_step(unit.node):
            return False
        return _returns_as_usual(unit.node, stmt)

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

    def _ends_the_run(self, unit: _Unit, stmt: ast.stmt, tested: set[str], loops: int) -> bool:
        """Does ``stmt`` end the run: a raise, a stop flag set (``self.model.stop_training
        = True``), or a ``break`` or ``return`` that leaves the training loop itself? What
        the branch does before it (gradients cleared, the best weights put back) is then
        tidying before a halt, not a reaction that goes on."""
        if self._raises(stmt):
            return True
        if isinstance(stmt, ast.Assign) and _constant_truth(stmt.value) is True:
            return any(asks_to_stop(dotted_name(t) or "") for t in stmt.targets)
        if isinstance(stmt, ast.Break):
            return bool(loops) and self._break_is_no_skip(unit, stmt, tested)
        if isinstance(stmt, ast.Return):
            return bool(loops) and self._returns_from_training(unit, stmt)
        return False

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
        return self.facts.called_in_a_loop(fn.name)

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
            if isinstance(stmt, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign) and any(
                self._ends_the_run(unit, later, tested, loops) for later in branch[at + 1 :]
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
            if self._restores_saved_state(unit, stmt):
                return "keep", stmt  # ``p.data = saved.data.clone()``: the update is undone
            if isinstance(stmt, ast.Return) and self._leaves_as_usual(unit, stmt):
                continue  # the caller gets what it always gets: nothing is skipped
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
            if isinstance(stmt, ast.Continue) and loops and _ends_its_iteration(unit.node, stmt):
                continue  # the loop body's last statement: nothing is left to skip
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
        # ``if ok: optimizer.step() else: continue``: a step in the other branch of an
        # ``if`` is not on the way to this ``continue``
        forks = [node for node in ast.walk(loop) if isinstance(node, ast.If) and node.orelse]
        on_the_way = [line for line in steps if not _apart(forks, line, stmt.lineno)]
        return bool(on_the_way) and all(line < stmt.lineno for line in on_the_way)

    def _return_kind(
        self, unit: _Unit, stmt: ast.Return, tested: set[str]
    ) -> tuple[str, ast.AST] | None:
        value = stmt.value
        if self._guards_a_call(unit):
            # a decorator's wrapper: what it returns stands for the wrapped step's result
            if value is None or _none(value):
                return "skip", stmt  # ``return None``: Lightning skips the step
            if self.facts.is_finite_constant(value):
                return "zero_value", stmt
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            # in code that trains, leaving is skipping the step; a helper that hands back
            # None marks the value missing, and what computes with it fails loudly,
            # unless its caller skips the batch on it (``if result is None: continue``)
            if unit.trains:
                return "skip", stmt
            return ("skip_by_caller", stmt) if self._skipped_by_caller(unit) else None
        if any(line > stmt.lineno for line in unit.updates_after):
            return "skip", stmt  # the optimizer step below is not taken
        if (
            isinstance(value, ast.Tuple)
            and value.elts
            and _none(value.elts[0])
            and all(isinstance(e, ast.Constant) for e in value.elts)
            and self._skipped_by_caller(unit)
        ):
            return "skip_by_caller", stmt  # ``return None, 0.0, 0``: no loss, and skipped
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
        if isinstance(value, ast.Call) and self.facts.is_finite_constant(value):
            return "constant_value", stmt  # ``return loss.new_zeros(())``: the loss is now zero
        constant = [isinstance(e, ast.Call) and self.facts.is_finite_constant(e) for e in elements]
        if any(constant) and not any(
            _names(e) & tested for e, c in zip(elements, constant, strict=True) if not c
        ):
            return "constant_value", stmt  # ``return torch.tensor(0.0), {}``: (loss, logs)
        if isinstance(value, ast.Call):
            return "skip", stmt
        parameters = (
            parameter_names(unit.node)
            if isinstance(unit.node, ast.FunctionDef | ast.AsyncFunctionDef)
            else set()
        )
        for element in elements:
            if isinstance(element, _COMPUTED):
                continue  # ``return offset + i``: a value worked out, not old state
            names = _names(element)
            if names & parameters or (
                self.facts.is_signal(element, unit.scope) and not names <= tested
            ):
                return "skip", stmt  # the old state goes back
        return None  # the tested values handed back: a search

    def _skipped_by_caller(self, unit: _Unit) -> bool:
        """Does a same-file caller of ``unit`` skip its training loop's batch when the
        call hands back None (or a tuple led by None)?"""
        name = getattr(unit.node, "name", None)
        return name is not None and self.facts.skipped_on_none(name)

    def _guards_a_call(self, unit: _Unit) -> bool:
        """Is ``unit`` a decorator's wrapper: a function nested in one that returns it,
        calling a parameter of that one (``def nan_guard(fn): def wrapper(*a): loss =
        fn(*a) ...; return wrapper``)?"""
        inner = unit.node
        outer = self._enclosing.get(id(inner))
        if not isinstance(inner, FunctionNode) or not isinstance(outer, FunctionNode):
            return False
        returned = any(
            isinstance(s, ast.Return) and isinstance(s.value, ast.Name) and s.value.id == inner.name
            for s in outer.body
        )
        wrapped = parameter_names(outer)
        return returned and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in wrapped
            for n in ast.walk(inner)
        )

    def _restores_saved_state(self, unit: _Unit, stmt: ast.stmt) -> bool:
        """Parameters put back to a copy saved before: ``p.data = last_p.data.clone()``,
        ``p.data.copy_(backup[name])``, ``model.load_state_dict(last_good)``. Not when
        the function does the same on its other paths too (a meta-learning loop puts
        its models back after every inner run): that is routine, not a reaction."""
        if not (isinstance(stmt, ast.Assign | ast.Expr) and self._restoring(unit, stmt)):
            return False
        shape = ast.dump(stmt)
        return sum(ast.dump(s) == shape for s in self._statements(unit.node)) == 1

    def _restoring(self, unit: _Unit, stmt: ast.Assign | ast.Expr) -> bool:
        value = stmt.value
        while isinstance(value, ast.Subscript):
            value = value.value  # ``mngr.restore(step)["state"]``
        if isinstance(value, ast.Call) and self._called(value) in ROLLBACK_CALLS:
            return True  # ``state = mngr.restore(best_step)``: the last good checkpoint
        if isinstance(stmt, ast.Assign):
            target = stmt.targets[0]
            return (
                len(stmt.targets) == 1
                and isinstance(target, ast.Attribute)
                and target.attr == "data"
                and not self.facts.is_constant(_first_of_chain(stmt.value))
                and dotted_name(target.value) in _parameter_names(unit.node)
            )
        if not isinstance(stmt.value, ast.Call):
            return False
        func = stmt.value.func
        if not (isinstance(func, ast.Attribute) and func.attr in RESTORING_CALLS):
            return False
        if not stmt.value.args or self.facts.is_constant(stmt.value.args[0]):
            return False  # ``p.data.copy_(torch.zeros_like(p))`` zeroes: not a saved copy
        owner = func.value.value if _is_data(func.value) else func.value
        name = dotted_name(owner) or ""
        if RESTORING_CALLS[func.attr] == "model":
            return name.rsplit(".", 1)[-1] != "self" and vocab.holds_training_state(name)
        return name in _parameter_names(unit.node)

    def _statements(self, root: ast.AST) -> list[ast.stmt]:
        return [node for node in self.facts.nodes(root) if isinstance(node, ast.stmt)]

    def _zeroes_part_of_a_gradient(
        self, unit: _Unit, target: ast.expr, value: ast.expr | None
    ) -> bool:
        """An element or slice of a gradient set to zero (by an index, not through a
        non-finite mask: NZ105 reports that assignment)."""
        if not isinstance(target, ast.Subscript) or value is None:
            return False
        owner = last_part(dotted_name(target.value) or "")
        if not (owner and vocab.names_gradients(owner)):
            return False
        if self.facts.is_nonfinite_test(target.slice, unit.scope, self.text):
            return False
        zero_fill = isinstance(value, ast.Call) and self._called(value) in sources.ZEROING_CALLS
        return zero_fill or (isinstance(value, ast.Constant) and value.value == 0)

    def _assign_kind(
        self, unit: _Unit, stmt: ast.Assign | ast.AugAssign | ast.AnnAssign, tested: set[str]
    ) -> str | None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == "grad" and _none(value):
                return "zero"
            if self._zeroes_part_of_a_gradient(unit, target, value):
                return "zero"  # ``z.grad[i] = zeros_like(z.grad[i])``, ``p.grad[...] = 0``
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "data"
                and value is not None
                and self.facts.is_signal(target.value, unit.scope)
                and self.facts.is_finite_constant(_first_of_chain(value))
            ):
                return "zero_value"  # ``loss.data = torch.tensor(0.0).to(device)``
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
            if _is_bool_constant(value):
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
            if _counts_up(stmt):
                continue  # ``self.nan_loss_count += 1``: a count of what was found
            base = key.removeprefix("self.")
            if base in tested or (
                vocab.is_signal_name(base.rsplit(".", 1)[-1]) and "loss" in base.lower()
            ):
                if isinstance(value, ast.Subscript) and _key(value.value) == key:
                    return "drop"  # ``losses = losses[finite]``: the bad samples leave
                if self._kept_for_the_record(unit, key, stmt):
                    continue  # ``loss_vlb = 0.0``, then only ``totals["vlb"] += loss_vlb``
                if self._only_ever_a_number(unit, key, value):
                    continue  # ``loss_value = 1.0`` ... else ``loss_value = loss.item()``
                return "replace"
        return None

    def _only_ever_a_number(self, unit: _Unit, key: str, value: ast.expr | None) -> bool:
        """Is the loss named ``key`` only ever a Python number in the function: a
        constant, or a tensor made one (``loss.item()``, ``float(loss)``), bound at least
        once that way? A loss as a number carries no gradient: put in place of a NaN, it
        changes only what is recorded. (Other numbers, a clipping scale, still act.)"""
        if "." in key or not vocab.is_loss_name(key):
            return False
        bound = [v for names, v in self.facts.bindings(unit.node) if key in names]
        converted = [v for v in bound if isinstance(v, ast.Call) and self._to_number(v)]
        return bool(converted) and all(
            v is value or v in converted or _plain_number(v) for v in bound
        )

    def _to_number(self, call: ast.Call) -> bool:
        """``x.item()``, ``float(x)``, and ``max(0.01, min(v, 15.0))`` of such numbers."""
        called = self._called(call)
        if called in vocab.TO_NUMBER:
            return True
        return called in ("max", "min") and all(
            _plain_number(a)
            or isinstance(a, ast.Name)
            or (isinstance(a, ast.Call) and self._to_number(a))
            for a in call.args
        )

    def _kept_for_the_record(self, unit: _Unit, key: str, stmt: ast.stmt) -> bool:
        """Is the plain name ``key``, once set by ``stmt``, read only by bookkeeping: added
        into an entry of a record (``totals["vlb"] += value``) or handed to a call that
        reports? A value only logged trains nothing, whatever it is named."""
        if "." in key:
            return False
        after = stmt.end_lineno or stmt.lineno
        readers = [
            s
            for s in _statements(unit.node)
            if s.lineno > after
            and any(isinstance(n, ast.Name) and n.id == key for n in _statement_expressions(s))
        ]
        return bool(readers) and all(map(self._records, readers))

    def _records(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.AugAssign):
            return isinstance(stmt.target, ast.Subscript)
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return self._called(stmt.value) in REPORTING_CALLS
        return False

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


def _apart(forks: list[ast.If], one: int, other: int) -> bool:
    """Are lines ``one`` and ``other`` in different branches of one of ``forks``?"""

    def within(block: list[ast.stmt], line: int) -> bool:
        return bool(block) and block[0].lineno <= line <= (block[-1].end_lineno or line)

    return any(
        (within(fork.body, one) and within(fork.orelse, other))
        or (within(fork.orelse, one) and within(fork.body, other))
        for fork in forks
    )


def _is_data(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "data"


def _first_of_chain(node: ast.expr) -> ast.expr:
    """``torch.tensor(0.0).to(device)``: the chain's first call (``torch.tensor(0.0)``)."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Call)
    ):
        node = node.func.value
    return node


def _ends_its_iteration(function: ast.AST, stmt: ast.Continue) -> bool:
    """Is ``stmt`` where its loop's body ends anyway (``step(); if bad(out): print();
    continue`` as the body's last lines)? Such a ``continue`` skips nothing."""
    loops = [
        node
        for node in ast.walk(function)
        if isinstance(node, _LOOPS) and node.lineno < stmt.lineno <= (node.end_lineno or 0)
    ]
    return bool(loops) and _last_in(max(loops, key=lambda node: node.lineno).body, stmt)


def _last_in(block: list[ast.stmt], stmt: ast.stmt) -> bool:
    """Is ``stmt`` the last statement run in ``block`` on some path through it?"""
    last = block[-1] if block else None
    if last is stmt:
        return True
    if isinstance(last, ast.If):
        return _last_in(last.body, stmt) or _last_in(last.orelse, stmt)
    if isinstance(last, ast.With | ast.AsyncWith):
        return _last_in(last.body, stmt)
    if isinstance(last, ast.Try) and not last.orelse:
        return _last_in(last.body, stmt) or any(_last_in(h.body, stmt) for h in last.handlers)
    return False


def _plain_number(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and type(value.value) in (int, float)
