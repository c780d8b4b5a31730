"""The file's functions, as ``FileFacts`` sees them: which are defined, which are tests,
loss functions or optimizer methods, which only observe, and which are called with their
result dropped. A mixin of ``FileFacts`` (``nozero.lint.facts.scopes``): its methods read
the file state that ``FileFacts.__init__`` sets and may ask the other parts through
``self``."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from functools import cached_property

from nozero.lint import vocab
from nozero.lint.facts.scope_ast import (
    _DIVISIONS,
    _LOSS_ENTRY_METHODS,
    _MODEL_FORWARD_METHODS,
    _NO_GRADIENT_BLOCKS,
    FunctionNode,
    _loss_returned,
    _names_a_loss_class,
    _names_a_model_class,
    _names_in,
    _updates_a_mapping,
    bound_names,
    names_and_attributes,
    parameter_names,
)
from nozero.lint.imports import child_statements, dotted_name, last_part
from nozero.lint.scaling import scaler_in_lines, steps_through_a_scaler
from nozero.lint.tables.reactions import SANITIZER_FILL_KEYWORDS

# First words of calls that handle a model without running it (``unwrap_model``,
# ``get_model``, ``load_model``, ``prepare_model``)
_MODEL_HANDLING_VERBS = frozenset(
    {"unwrap", "wrap", "get", "load", "save", "build", "make", "create", "prepare", "copy"}
)
# Keywords of a Hessian-vector product (``autograd.grad(grads, params, grad_outputs=v)``)
_CURVATURE_KEYWORDS = frozenset({"grad_outputs", "create_graph"})


class FunctionFacts:
    """Facts about the file's functions, the mixin part of ``FileFacts``."""

    # ---- the file's functions -------------------------------------------------------
    @cached_property
    def _functions(self) -> dict[int, tuple[FunctionNode, FunctionNode | None]]:
        """def line -> (function, enclosing function or None)."""
        found: dict[int, tuple[FunctionNode, FunctionNode | None]] = {}
        stack: list[tuple[ast.AST, FunctionNode | None]] = [(self.tree, None)]
        while stack:
            node, enclosing = stack.pop()
            for child in child_statements(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[child.lineno] = (child, enclosing)
                    stack.append((child, child))
                else:
                    stack.append((child, enclosing))
        return found

    @cached_property
    def _functions_by_name(self) -> dict[str, list[FunctionNode]]:
        by_name: dict[str, list[FunctionNode]] = {}
        for fn, _ in self._functions.values():
            by_name.setdefault(fn.name, []).append(fn)
        return by_name

    def defines_function(self, name: str) -> bool:
        """A function of this file, or a helper imported from the project."""
        return name in self._functions_by_name or name in self.imported

    def declares_setting(self, name: str) -> bool:
        """Does the file give the setting ``name`` a default (``zero_infinity: bool =
        field(default=False)`` in a config class, ``def __init__(self, zero_infinity=False)``)?
        A switch rule reports the default there, not each read of it."""
        return name in self._declared_settings

    @cached_property
    def _declared_settings(self) -> frozenset[str]:
        found: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                found |= bound_names(node.target)
            elif isinstance(node, ast.arguments):
                positional = [*node.posonlyargs, *node.args]
                found |= {a.arg for a in positional[len(positional) - len(node.defaults) :]}
                found |= {
                    a.arg for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d
                }
        return frozenset(found)

    def functions_named(self, name: str) -> list[FunctionNode]:
        return self._functions_by_name.get(name, [])

    def functions_meant(self, name: str, within: Sequence[int] = ()) -> list[FunctionNode]:
        """The definitions ``name`` may mean where it is read inside the functions whose
        def lines are ``within`` (outermost first). A function nested in one of them
        shadows the file's others of that name: two helpers, each with its own ``_fix``."""
        defs = self._functions_by_name.get(name, [])
        if len(defs) < 2 or not within:
            return defs
        enclosing = {fn.lineno: self._functions[fn.lineno][1] for fn in defs}
        for key in reversed(within):
            local = [fn for fn in defs if (e := enclosing[fn.lineno]) and e.lineno == key]
            if local:
                return local
        return [fn for fn in defs if enclosing[fn.lineno] is None] or defs

    def helper_name(self, func: ast.expr) -> str | None:
        """The same-file function a call goes to (``helper(...)``, ``self.helper(...)``),
        or the project's helper: imported (``helper``), or inherited from a base class in
        another module (``self.helper``, its key in ``imported``)."""
        if isinstance(func, ast.Name):
            name = func.id
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and (func.value.id in ("self", "cls"))
        ):
            name = func.attr
        else:
            return None
        if isinstance(func, ast.Attribute):
            return self.method_helper(name)
        if name in self.imported:
            return name
        return name if name in self._functions_by_name else None

    def method_helper(self, name: str) -> str | None:
        """What ``self.name(...)`` calls: the same-file function ``name``, or a method
        inherited from a class of another module of the project (key ``self.name``)."""
        if name in self._functions_by_name:
            return name
        inherited = f"self.{name}"
        return inherited if inherited in self.imported else None

    def dropped_calls(self, name: str) -> list[tuple[FunctionNode, int]]:
        """(caller, line) of each call to the same-file function ``name`` made as a
        statement of its own: the caller drops what the function returns."""
        return self._dropped_calls.get(name, [])

    @cached_property
    def _dropped_calls(self) -> dict[str, list[tuple[FunctionNode, int]]]:
        found: dict[str, list[tuple[FunctionNode, int]]] = {}
        for caller, _ in self._functions.values():
            for node in self.nodes(caller):
                if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                    name = self.helper_name(node.value.func)
                    if name is not None:
                        found.setdefault(name, []).append((caller, node.lineno))
        return found

    def function_at(self, line: int) -> FunctionNode | None:
        """The function defined on ``line`` (a rule's ``scope_key``), if any."""
        found = self._functions.get(line)
        return found[0] if found else None

    def skipped_on_none(self, name: str) -> bool:
        """Does a caller of the same-file function ``name`` skip its loop's iteration
        when the call hands back None (``result = self.forward(batch)``, then ``if result
        is None: continue``), in a function that steps?"""
        return name in self._skips_on_none

    @cached_property
    def _skips_on_none(self) -> frozenset[str]:
        found: set[str] = set()
        for caller, _ in self._functions.values():
            bound: dict[str, str] = {}  # a name bound to a same-file call -> the callee
            skipped: set[str] = set()  # names found missing by a test whose body continues
            for node in self.nodes(caller):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    callee = self.helper_name(node.value.func)
                    for target in node.targets:
                        if isinstance(target, ast.Tuple) and target.elts:
                            target = target.elts[0]  # ``loss, logs = self.forward(batch)``
                        if callee is not None and isinstance(target, ast.Name):
                            bound[target.id] = callee
                elif isinstance(node, ast.If) and any(
                    isinstance(s, ast.Continue) for s in node.body
                ):
                    tested = _tested_for_none(node.test)
                    if tested is not None:
                        skipped.add(tested)
            # a loop that takes no step skips unreadable files, say
            if skipped & bound.keys() and any(map(self.is_update, self.nodes(caller))):
                found |= {bound[name] for name in skipped & bound.keys()}
        return frozenset(found)

    def called_in_a_loop(self, name: str) -> bool:
        """Is the same-file function ``name`` called inside a loop of this file (``for
        batch in loader: train_step(batch)``): a round or a step of a longer run?"""
        return name in self._called_in_loops

    @cached_property
    def _called_in_loops(self) -> frozenset[str]:
        found: set[str] = set()
        stack: list[tuple[ast.AST, bool]] = [(self.tree, False)]  # (node, inside a loop)
        while stack:
            node, in_loop = stack.pop()
            if in_loop and isinstance(node, ast.Call):
                name = self.helper_name(node.func)
                if name is not None:
                    found.add(name)
            in_loop = in_loop or isinstance(node, ast.For | ast.AsyncFor | ast.While)
            stack.extend((child, in_loop) for child in ast.iter_child_nodes(node))
        return frozenset(found)

    def is_update(self, node: ast.AST) -> bool:
        """A call that steps (``optimizer.step()``, ``apply_updates``, ``backward``)."""
        return isinstance(node, ast.Call) and (
            self.called(node.func) in vocab.UPDATE_CALLS or steps_through_a_scaler(node)
        )

    def in_evaluation_loop(self, fn: ast.AST, line: int) -> bool:
        """Is ``line`` in a loop of ``fn`` over evaluation data (``for batch in
        val_loader``) that takes no step: a validation pass inside the training function."""
        return any(
            isinstance(node, ast.For | ast.AsyncFor)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
            and any(map(vocab.names_evaluation, names_and_attributes(node.iter)))
            and not any(map(self.is_update, ast.walk(node)))
            for node in self.nodes(fn)
        )

    def only_observes(self, key: int, line: int | None = None) -> bool:
        """Does the function on line ``key``, or one around it, only observe values
        (evaluation under ``no_grad``/``eval()``, plots, metrics) while computing no
        gradient and taking no step? What it does with a non-finite value trains nothing.
        Given the ``line`` of what it does, a function whose one sign of observing is a
        ``with no_grad():`` block observes only inside that block: the log-probs a loss is
        computed from, beside an entropy taken without gradient, still train."""
        while key in self._functions:
            function, enclosing = self._functions[key]
            if self._observes(function) and not self._outside_no_grad_blocks(function, line):
                return True
            if line is not None and _within_any(line, self._eval_only_spans(function)):
                return True
            key = enclosing.lineno if enclosing else 0
        return False

    def _eval_only_spans(self, fn: FunctionNode) -> tuple[tuple[int, int], ...]:
        """The lines of ``fn``'s branches taken only when the module is not training: the
        body of ``if not self.training:`` and the ``else`` of ``if self.training:``
        (nerfstudio cleans a rendered colour for display only when evaluating)."""
        if fn.lineno not in self._eval_only_memo:
            spans = []
            for node in self.nodes(fn):
                if isinstance(node, ast.If):
                    branch = _eval_only_branch(node)
                    if branch:
                        spans.append((branch[0].lineno, branch[-1].end_lineno or branch[0].lineno))
            self._eval_only_memo[fn.lineno] = tuple(spans)
        return self._eval_only_memo[fn.lineno]

    def _outside_no_grad_blocks(self, fn: FunctionNode, line: int | None) -> bool:
        spans = None if line is None else self._no_grad_spans(fn)
        return spans is not None and not _within_any(line, spans)

    def _no_grad_spans(self, fn: FunctionNode) -> tuple[tuple[int, int], ...] | None:
        """The lines of ``fn``'s ``with no_grad():`` blocks, where they are its only sign of
        observing (no such decorator, no ``eval()``, no plot or metric call, no evaluation
        name, no curvature product) and a model is called outside them (a forward pass
        with gradient); None otherwise. A function that only generates and scores calls
        no model outside its blocks: it still observes."""
        if fn.lineno in self._no_grad_memo:
            return self._no_grad_memo[fn.lineno]
        spans: tuple[tuple[int, int], ...] | None = None
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
        markers = {self.called(n.func) for n in calls} & vocab.OBSERVING_MARKERS
        decorators = {
            self.called(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list
        }
        if (
            not decorators & vocab.OBSERVING_MARKERS
            and not vocab.names_evaluation(fn.name)
            and markers <= _NO_GRADIENT_BLOCKS
            and not any(k.arg in _CURVATURE_KEYWORDS for c in calls for k in c.keywords)
        ):
            found = self._without_gradient(fn)
            outside = [c for c in calls if not _within_any(c.lineno, found) and _runs_a_model(c)]
            spans = found if found and outside else None
        self._no_grad_memo[fn.lineno] = spans
        return spans

    def _without_gradient(self, fn: FunctionNode) -> tuple[tuple[int, int], ...]:
        """The first and last lines of each ``with no_grad():`` (or ``inference_mode``)
        block in ``fn``."""
        return tuple(
            (node.lineno, node.end_lineno or node.lineno)
            for node in self.nodes(fn)
            if isinstance(node, ast.With | ast.AsyncWith)
            and any(
                isinstance(item.context_expr, ast.Call)
                and self.called(item.context_expr.func) in _NO_GRADIENT_BLOCKS
                for item in node.items
            )
        )

    def _observes(self, fn: FunctionNode) -> bool:
        key = ("observes", str(fn.lineno))
        if key not in self._helper_memo:
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            # Hessian-vector products (``autograd.grad(grads, params, grad_outputs=v)``)
            # measure curvature; they are diagnostics unless a step follows
            curvature = [c for c in calls if any(k.arg in _CURVATURE_KEYWORDS for k in c.keywords)]
            called = {
                self.called(n.func)
                for n in calls
                if n not in curvature and not _updates_a_mapping(n)
            }
            # ``@torch.no_grad()`` as well as ``@torch.no_grad``
            decorators = {
                self.called(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list
            }
            called |= decorators
            evaluation = vocab.names_evaluation(fn.name)
            if evaluation:  # ``validation_step`` calling the module's shared ``self.step``
                called -= {self.helper_name(n.func) for n in calls} - {None}
            # An optimizer's ``step`` runs under ``no_grad`` as torch's own do: it trains.
            # A loss function trains too: what it returns is backpropagated, whatever it
            # computes under ``no_grad`` (a score-distillation target).
            trains = (
                called & (vocab.UPDATE_CALLS | vocab.TRAINING_CALLS)
                or (
                    vocab.STEPPING_NAME_WORDS.intersection(vocab.name_words(fn.name))
                    and not evaluation
                )
                or self.is_loss_function(fn)
                or fn.lineno in self._optimizer_methods
                or (
                    not evaluation
                    and called & vocab.OBSERVING_MARKERS <= _NO_GRADIENT_BLOCKS
                    and not decorators & _NO_GRADIENT_BLOCKS
                    and self._returns_loss_with_gradient(fn)
                )
            )
            marked = bool(called & vocab.OBSERVING_MARKERS) or bool(curvature) or evaluation
            self._helper_memo[key] = not trains and marked
        return self._helper_memo[key]

    def _returns_loss_with_gradient(self, fn: FunctionNode) -> bool:
        """Does ``fn`` hand back a loss it computed outside ``no_grad`` (``with no_grad():
        frames = decode(x)`` ... ``loss = (reward * recon).mean(); return loss``)? Its
        caller backpropagates it, whatever the function is named."""
        returned = {
            name
            for node in self.nodes(fn)
            if isinstance(node, ast.Return) and node.value is not None
            for name in _names_in(_loss_returned(node.value))
            if vocab.is_loss_name(name)
        }
        if not returned:
            return False
        without_gradient = self._without_gradient(fn)
        return any(
            bool(names & returned) and not _within_any(value.lineno, without_gradient)
            for names, value in self.bindings(fn)
        )

    def mentions_scaling(self, key: int) -> bool:
        """Is the function on line ``key`` part of fp16 dynamic loss scaling (a scaler at
        work: the scale adjusted, a scaler's API used)? Its selects are the opt-in rule's."""
        entry = self._functions.get(key)
        if entry is None:
            return False
        fn = entry[0]
        first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        return scaler_in_lines(self.nodes(fn), self.source, first, fn.end_lineno or fn.lineno)

    def hides_nothing(self, call: ast.Call) -> bool:
        """A ``nan_to_num`` that hides no non-finite training value: every replacement is
        NaN again (Inf made more visible), or it guards the 0/0 of a scale factor
        (``nan_to_num(minimum(clip / norm, 1.0), nan=1.0)``) while NaN gradients still
        flow through the product."""
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        if keywords and all(
            self._is_nan_constant(keywords.get(name)) for name in SANITIZER_FILL_KEYWORDS
        ):
            return True
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
        if isinstance(receiver, ast.Call | ast.BinOp | ast.Subscript):
            # the tensor method: ``max_norm.div_(grad_norm).nan_to_num_(nan=1.0)``
            subject, nan = receiver, keywords.get("nan", call.args[0] if call.args else None)
        else:
            nan = keywords.get("nan", call.args[1] if len(call.args) > 1 else None)
            subject = call.args[0] if call.args else keywords.get("x")
        return self._is_ratio(subject) and isinstance(nan, ast.Constant) and nan.value == 1

    def _is_ratio(self, node: ast.expr | None) -> bool:
        """``clip / norm``, ``max_norm.div_(norm)``, ``minimum(clip / norm, 1.0)``."""
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, ast.Div)
        if not isinstance(node, ast.Call):
            return False
        name = self.called(node.func)
        if name in _DIVISIONS:
            return True
        if name in {"minimum", "min", "clip", "clamp", "clamp_"}:
            receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
            return any(self._is_ratio(a) for a in [*node.args, *receiver])
        return False

    def _is_nan_constant(self, node: ast.expr | None) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ("nan", "NaN")
        return (
            isinstance(node, ast.Call)
            and dotted_name(node.func) == "float"
            and bool(node.args)
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).lower() == "nan"
        )

    def in_test(self, key: int) -> bool:
        """Is line ``key``'s function inside a test (``def test_...``, a ``Test...`` class
        or a ``...TestCase``, or anything in a test module)? A test that calls a switch
        exercises it; it trains nothing."""
        return self.test_module or key in self._test_functions

    @cached_property
    def _test_functions(self) -> frozenset[int]:
        return self._marked_functions(
            lambda cls: cls.name.startswith("Test") or cls.name.endswith(("Test", "TestCase")),
            lambda fn: fn.name.startswith("test"),
        )

    @cached_property
    def _optimizer_methods(self) -> frozenset[int]:
        """Def lines of the functions in a class that subclasses an optimizer
        (``class Lion(torch.optim.Optimizer)``): optimizer code, which trains."""
        if "Optimizer" not in self.source:
            return frozenset()
        return self._marked_functions(
            lambda cls: any("Optimizer" in last_part(dotted_name(b) or "") for b in cls.bases)
        )

    def is_loss_function(self, function: FunctionNode) -> bool:
        """A function named for a loss (``def dice_loss``), the entry point of a loss
        class (``class DDPLoss(nn.Module): def forward``, a Keras ``Loss.call``), or the
        closure a factory named for a loss hands back (``def get_rh_loss(...): def
        metric(pred, true): ...; return metric``)."""
        if vocab.is_loss_name(function.name):
            return True
        if function.name in _LOSS_ENTRY_METHODS and function.lineno in self._loss_class_methods:
            return True
        factory = self._functions.get(function.lineno, (None, None))[1]
        return (
            factory is not None
            and vocab.is_loss_name(factory.name)
            and any(
                isinstance(s, ast.Return)
                and isinstance(s.value, ast.Name)
                and s.value.id == function.name
                for s in factory.body
            )
        )

    @cached_property
    def _loss_class_methods(self) -> frozenset[int]:
        # ``MAELoss``, ``DDPLoss``: a capital run before ``Loss`` is one word to split on
        return self._marked_functions(_names_a_loss_class)

    def is_model_forward(self, function: FunctionNode) -> bool:
        """The method a model class computes its outputs in: what its ``self.part(...)``
        calls return is the model's output, whatever the parts are named."""
        return (
            function.name in _MODEL_FORWARD_METHODS
            and function.lineno in self._marked_functions(_names_a_model_class)
        )

    def _marked_functions(
        self,
        class_mark: Callable[[ast.ClassDef], bool],
        function_mark: Callable[[FunctionNode], bool] = lambda fn: False,
    ) -> frozenset[int]:
        """Def lines of the functions in a class ``class_mark`` accepts or that
        ``function_mark`` accepts, and of every function nested in one."""
        found: set[int] = set()
        stack: list[tuple[ast.AST, bool]] = [(self.tree, False)]
        while stack:
            node, inside = stack.pop()
            for child in child_statements(node):
                if isinstance(child, ast.ClassDef):
                    stack.append((child, inside or class_mark(child)))
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    marked = inside or function_mark(child)
                    if marked:
                        found.add(child.lineno)
                    stack.append((child, marked))
                else:
                    stack.append((child, inside))
        return frozenset(found)

    def parameters(self, key: int) -> set[str]:
        """Parameter names of the function defined on line ``key`` (none at module level)."""
        entry = self._functions.get(key)
        return parameter_names(entry[0]) if entry else set()


# A module's training mode as code reads it (``self.training``, flax's ``train``).
_TRAINING_MODE_NAMES = frozenset({"training", "is_training", "train"})


def _reads_training_mode(node: ast.expr) -> bool:
    return last_part(dotted_name(node) or "") in _TRAINING_MODE_NAMES


def _eval_only_branch(node: ast.If) -> list[ast.stmt]:
    """The branch of ``node`` taken only when not training (empty when none is)."""
    test = node.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return node.body if _reads_training_mode(test.operand) else []
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is | ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is False
    ):
        return node.body if _reads_training_mode(test.left) else []
    return node.orelse if _reads_training_mode(test) else []


def _within_any(line: int, spans: tuple[tuple[int, int], ...]) -> bool:
    return any(first <= line <= last for first, last in spans)


def _runs_a_model(call: ast.Call) -> bool:
    """Is ``call`` a forward pass: a model called (``model(x)``, ``self.lm_head(h)``,
    ``state.apply_fn(p, x)``) or a method of one (``self.encoder.embed(x)``)? A name that
    only starts with a model word (``tokenizer.apply_chat_template``) is no model."""
    chain = [part for part in (dotted_name(call.func) or "").split(".") if part and part != "self"]
    if not chain:
        return False
    *owners, last = chain
    words = vocab.name_words(last)
    if words and words[0] in _MODEL_HANDLING_VERBS:
        return False  # ``accelerator.unwrap_model(model)`` hands a model back, runs none
    return any(map(vocab.is_model_name, owners)) or bool(
        words and (words[-1] in vocab.MODEL_WORDS or words[-1] == "fn")
    )


def _tested_for_none(test: ast.expr) -> str | None:
    """The name ``test`` finds missing: ``x is None``, ``x[0] is None``, ``not x``, or
    one of them joined by ``or`` with other tests."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return next((n for n in map(_tested_for_none, test.values) if n is not None), None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand.id if isinstance(test.operand, ast.Name) else None
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return None
    left = test.left
    if isinstance(left, ast.Subscript) and isinstance(left.slice, ast.Constant):
        left = left.value if left.slice.value == 0 else left  # ``result[0] is None``
    return left.id if isinstance(left, ast.Name) else None
