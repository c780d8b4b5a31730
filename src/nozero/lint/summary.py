"""What one module offers the rest of its project: a summary read from its own text.

Per module-level function, and per method of a module-level class (``Class.method``),
whether it tests an argument for NaN/Inf and hands back the answer, cleans one
(``nan_to_num``-like), or raises on a non-finite value; and each reaction to a
non-finite value (a skip, a zeroing, a replacement, old state kept) that a switch gates:
a parameter (``def fit(skip_nan=False)``), an attribute (``self.skip``, set from
``__init__``'s parameter) or a config key (``cfg.skip_nan``, ``cfg["skip"]``).
Another module that imports the helper, or turns the switch on, is judged by this.

A summary depends on the module's bytes only, so it is cached by content hash, and it is
plain JSON data (workers receive it, the cache stores it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nozero.lint import prefilter, vocab
from nozero.lint.files import is_test_module
from nozero.lint.imports import child_statements, dotted_name

if TYPE_CHECKING:
    from nozero.lint.facts import FileFacts
    from nozero.lint.facts.scopes import Scope

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Helper:
    """What a module-level function or a class's method does with its arguments."""

    tests: bool = False  # returns whether an argument is finite or not
    cleans: tuple[tuple[int, str], ...] = ()  # (position, name) of each argument it cleans
    raises: bool = False  # raises (or exits) on a non-finite value
    signal: bool = False  # hands back training signal (a loss, gradients)
    polarity: bool = True  # what it returns when the value is non-finite
    scaling: bool = False  # its test is a dynamic loss scaler's overflow check
    # it zeroes or cleans the gradients of what it is given, in place (``p.grad`` of each
    # parameter of a model handed to it): a call handing it a model is a finding too
    cleans_gradients: bool = False

    @property
    def kinds(self) -> dict[str, bool]:
        """Answers under the names ``FileFacts`` asks same-file helpers by."""
        return {
            "tests_parameter": self.tests,
            "sanitizes_parameter": bool(self.cleans),
            "raises_somewhere": self.raises,
            "returns_signal": self.signal,
            "cleans_given_gradients": self.cleans_gradients,
        }


@dataclass(frozen=True)
class Switch:
    """A setting that, when true, lets a reaction to a non-finite value happen.

    ``kind``: ``param`` (a parameter of ``function``, at ``position`` after ``self``;
    ``function`` is ``Class`` for a class's ``__init__``), ``method`` (a parameter of a
    method, matched by the method's name) or ``key`` (an attribute or config key, matched
    by name wherever it is set)."""

    kind: str
    function: str
    name: str
    position: int
    line: int  # the reaction's line
    reaction: str  # the reaction's kind (``skip``, ``zero`` ...)
    scaling: bool


@dataclass(frozen=True)
class Summary:
    helpers: dict[str, Helper] = field(default_factory=dict)
    switches: tuple[Switch, ...] = ()
    # A package's ``__init__`` handing on names of its modules: ``from .checks import bad``
    # is ``{"bad": (".checks", "bad")}``, so ``from pkg import bad`` reaches the helper.
    reexports: dict[str, tuple[str, str]] = field(default_factory=dict)

    def to_json(self) -> list:
        # fields are flat (str, int, bool, tuples of str): a shallow copy serialises the
        # same as ``asdict``, whose deep copy costs a warm pre-commit run milliseconds
        helpers = {name: dict(vars(h)) for name, h in self.helpers.items()}
        return [helpers, [dict(vars(s)) for s in self.switches], self.reexports]

    @classmethod
    def from_json(cls, data: list) -> Summary:
        helpers = {
            name: Helper(**{**h, "cleans": tuple(tuple(c) for c in h["cleans"])})
            for name, h in data[0].items()
        }
        reexports = {k: tuple(v) for k, v in data[2].items()} if len(data) > 2 else {}
        return cls(helpers, tuple(Switch(**s) for s in data[1]), reexports)  # type: ignore[arg-type]


EMPTY = Summary()
# Words of a name that holds settings, and attributes that are a value's own properties.
_SETTINGS_WORDS = frozenset(
    {"cfg", "config", "conf", "configs", "args", "opts", "options", "hparams", "hp", "settings"}
    | {"flags", "hyperparams", "params_cfg", "run", "trainer", "training_args"}
)
_VALUE_ATTRIBUTES = frozenset(
    {"requires_grad", "grad", "data", "is_leaf", "shape", "dtype", "device", "is_cuda"}
)
# Switch names too plain to be matched by name across a project.
_PLAIN_NAMES = frozenset(
    {"enabled", "enable", "debug", "verbose", "training", "use_amp"}
    # a model's mode, set wherever a model is built or run: no choice to hide NaNs
    | {"is_training", "is_train", "do_train", "train_mode", "is_eval", "inference_mode"}
)


def summarize(source: str, path: str = "<module>") -> Summary:
    """The summary of one module's text (an empty one when it cannot hold any fact; a
    test module's code serves its tests only)."""
    if is_test_module(path) or not prefilter.could_hold_finding(source):
        return reexports_summary(source, path)
    try:
        tree = ast.parse(source, filename=path)
        from nozero.lint.facts import file_facts  # the whole-file pass: only for trigger text

        return summarize_facts(tree, source, file_facts(tree, source), path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return EMPTY


def reexports_summary(source: str, path: str) -> Summary:
    """A package ``__init__`` without trigger text still hands names on."""
    if is_test_module(path) or not path.endswith("__init__.py") or "import" not in source:
        return EMPTY
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return EMPTY
    reexports = _reexports(tree, path)
    return Summary(reexports=reexports) if reexports else EMPTY


def _reexports(tree: ast.Module, path: str) -> dict[str, tuple[str, str]]:
    """The names a package's ``__init__`` imports from a module at its top level."""
    if not path.endswith("__init__.py"):
        return {}
    return {
        alias.asname or alias.name: ("." * node.level + (node.module or ""), alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
        if alias.name != "*"
    }


def summarize_facts(tree: ast.Module, source: str, facts: FileFacts, path: str) -> Summary:
    """The summary, from the facts the file's own lint built (one parse for both)."""
    if is_test_module(path) or not prefilter.could_hold_finding(source):
        return reexports_summary(source, path)
    helpers = {}
    lines = source.splitlines()
    for owner, node in _functions_and_methods(tree):
        if not facts.in_test(node.lineno) and prefilter.could_hold_finding(
            "\n".join(lines[node.lineno - 1 : node.end_lineno])
        ):  # a helper about non-finite values holds a word for them
            helper = _helper(facts, node.name)
            if helper is not None:
                helpers[f"{owner}.{node.name}" if owner else node.name] = helper
    return Summary(helpers, tuple(_switches(tree, facts)), _reexports(tree, path))


def _functions_and_methods(tree: ast.Module) -> Iterator[tuple[str, FunctionNode]]:
    """(class name or '', function) for each module-level function and each method of a
    module-level class: a subclass in another module calls the methods it inherits as
    ``self.method(...)``."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield "", node
        elif isinstance(node, ast.ClassDef):
            for member in node.body:  # (``__init__``, ``__call__``: never a helper)
                if isinstance(member, FunctionNode) and not member.name.startswith("__"):
                    yield node.name, member


def _helper(facts: FileFacts, name: str) -> Helper | None:
    """What the function ``name`` offers as a helper, or None when it neither tests, nor
    cleans, nor raises (then nothing else about it is asked: the other questions cost
    most, and a function that does none of the three is no helper)."""
    from nozero.lint.facts import reactions

    reactions(facts)  # builds the file's flows, which read what a function hands back
    returned = facts.flows._helper_returns(name).get(None)
    raises = facts.is_raising_helper(name)
    cleans = tuple(facts.sanitized_parameters(name)) if facts.is_sanitizer_helper(name) else ()
    if not (returned is not None or cleans or raises):
        return None
    return Helper(
        tests=returned is not None,
        cleans=cleans,
        raises=raises,
        signal=facts._helper_returns_signal(name),
        polarity=returned[1] if returned else True,
        scaling=returned[0].scaling if returned else False,
        cleans_gradients=bool(cleans) and facts.cleans_given_gradients(name),
    )


# ---- switches -------------------------------------------------------------------------
@dataclass
class _Place:
    """Where a statement sits: its class, function, and the tests that must be true."""

    cls: ast.ClassDef | None
    function: FunctionNode | None
    tests: list[ast.expr]
    # the functions around ``function``, innermost first: a closure's test may read a
    # parameter of the factory that made it (``if reset_if_nan:`` in ``step``)
    enclosing: tuple[FunctionNode, ...] = ()


def _places(tree: ast.Module) -> dict[int, _Place]:
    """First line of each statement -> its place (the ``if`` tests on the way in)."""
    found: dict[int, _Place] = {}
    stack: list[tuple[ast.AST, _Place]] = [(tree, _Place(None, None, []))]
    while stack:
        node, place = stack.pop()
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = _branch_place(node, name, place)
            for child in getattr(node, name, ()):
                if isinstance(child, ast.excepthandler | ast.match_case):
                    stack.append((child, inner))
                    continue
                if not isinstance(child, ast.stmt):
                    continue
                found.setdefault(child.lineno, inner)
                if isinstance(child, ast.ClassDef):
                    stack.append((child, _Place(child, None, [])))
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    around = (inner.function, *inner.enclosing) if inner.function else ()
                    stack.append((child, _Place(inner.cls, child, [], around)))
                else:
                    stack.append((child, inner))
    return found


def _branch_place(node: ast.AST, branch: str, place: _Place) -> _Place:
    """The place of the statements in ``node``'s ``branch``: an ``if``'s body adds its
    test; its ``else`` the test negated (``if not self.skip_nan or isfinite(loss):
    step() else: <reaction>`` runs the reaction when the test is false)."""
    if not isinstance(node, ast.If):
        return place
    if branch == "body":
        test: ast.expr = node.test
    else:
        test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        test.gate = node  # type: ignore[attr-defined]  # the ``if`` it negates
    return _Place(place.cls, place.function, [*place.tests, test], place.enclosing)


def switch_reference(operand: ast.expr, parameters: set[str]) -> tuple[str, str] | None:
    """``(kind, name)`` when ``operand`` reads a setting plainly: a parameter, ``self.x``,
    ``cfg.x``, ``cfg["x"]``, ``cfg.get("x")``, ``getattr(cfg, "x")``."""
    if isinstance(operand, ast.Name):
        return ("param", operand.id) if operand.id in parameters else None
    if isinstance(operand, ast.Attribute):
        if operand.attr in _VALUE_ATTRIBUTES or not _settings_holder(operand.value):
            return None  # ``param.requires_grad``: a property of a value, no setting
        return "key", operand.attr
    if isinstance(operand, ast.Subscript) and _settings_holder(operand.value):
        key = operand.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return "key", key.value
        return None
    if isinstance(operand, ast.Call) and operand.args:
        first = operand.args[0]
        func = operand.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and _settings_holder(func.value):
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                return "key", first.value
        if isinstance(func, ast.Name) and func.id == "getattr" and len(operand.args) >= 2:
            name = operand.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                return "key", name.value
    return None


def _settings_holder(node: ast.expr) -> bool:
    """Is ``node`` where settings live: ``self`` (``self.skip``, ``self.cfg``) or a name
    for a configuration (``cfg``, ``args``, ``hparams``, ``self.config.train``)?"""
    while isinstance(node, ast.Attribute):
        if set(vocab.name_words(node.attr)) & _SETTINGS_WORDS:
            return True
        node = node.value
    if not isinstance(node, ast.Name):
        return False
    return node.id in ("self", "cls") or bool(set(vocab.name_words(node.id)) & _SETTINGS_WORDS)


# Reactions no setting turns on: a scaler's construction (its own ``enabled`` decides).
_NOT_GATED = frozenset({"scaler_built"})
# Reactions reported at the ``if`` whose test decides them (the step taken only when the
# values are finite; nothing done when they are not).
_AT_THE_IF = frozenset({"not_taken", "go_on"})


def _gating_operands(test: ast.expr) -> list[ast.expr]:
    """What must each be true for ``test`` to hold: the parts of an ``and``, and of a
    negated ``or`` each negated (``not (not skip or finite)``: ``skip``, ``not finite``)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [part for value in test.values for part in _gating_operands(value)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = test.operand
        if isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.Not):
            return _gating_operands(inner.operand)
        if isinstance(inner, ast.BoolOp) and isinstance(inner.op, ast.Or):
            negated = [ast.UnaryOp(op=ast.Not(), operand=value) for value in inner.values]
            return [part for value in negated for part in _gating_operands(value)]
    return [test]


def _parameters(fn: FunctionNode) -> set[str]:
    return set(_positional(fn)) | {a.arg for a in fn.args.kwonlyargs}


def _positional(fn: FunctionNode) -> list[str]:
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _switches(tree: ast.Module, facts: FileFacts) -> list[Switch]:
    from nozero.lint.facts import reactions

    found: dict[tuple, Switch] = {}
    flowing = reactions(facts)
    cleaning = any(word in facts.source for word in vocab.SANITIZERS)
    # one walk of the statements, when a reaction or a cleaning may be gated
    places = _places(tree) if flowing or cleaning else {}
    gated = [*flowing, *(_cleanings(tree, places, facts) if cleaning else [])]
    if not gated:
        return list(found.values())
    ifs = {id(node.test): node for node in ast.walk(tree) if isinstance(node, ast.If)}
    own_tests = {node.lineno: node.test for node in ifs.values()}
    reacting = {reaction.line for reaction in gated}
    for reaction in gated:
        if reaction.kind in _NOT_GATED:
            continue
        place = places.get(reaction.first)
        if place is not None and reaction.first in own_tests and reaction.kind in _AT_THE_IF:
            # ``if not self.skip_nan or isfinite(loss): <step>``, reported at the ``if``:
            # the step is left out when the test is false
            negated = ast.UnaryOp(op=ast.Not(), operand=own_tests[reaction.first])
            place = _Place(place.cls, place.function, [*place.tests, negated], place.enclosing)
        if place is None or not place.tests:
            continue
        fn = place.function
        if fn is not None and facts.in_test(fn.lineno):
            continue
        parameters = {name for f in (fn, *place.enclosing) if f for name in _parameters(f)}
        flags = {reaction.route.flag} | set(reaction.route.looked_at)
        for test in place.tests:
            if _decides_both_ways(ifs.get(id(test)), flags, reaction.route.line):
                continue  # ``if optimizer_update: if finite: step() else: ...``: the whole step
            if _reacts_either_way(test, ifs, reacting):
                continue  # ``if use_amp: <skip> else: <the same skip>``: no choice about NaNs
            for operand in _gating_operands(test):
                ref = switch_reference(operand, parameters)
                if ref is None or ref[1] in flags:
                    continue
                for switch in _switch_records(ref, place, reaction, tree):
                    key = (switch.kind, switch.function, switch.name)
                    if key not in found or _opt_in(found[key]) > _opt_in(switch):
                        found[key] = switch  # the reaction the default rules report wins
    for switch in _forwarded_keys(tree, [s for s in found.values() if s.kind == "param"]):
        found.setdefault((switch.kind, switch.function, switch.name), switch)
    return list(found.values())


def _opt_in(switch: Switch) -> bool:
    """Is the reaction a switch turns on reported only by an opt-in rule (a check that
    only logs, NZ203; dynamic loss scaling, NZ406)? A switch gating both a log line and a
    roll-back is reported as turning the roll-back on."""
    return switch.reaction == "log_only" or switch.scaling


def _reacts_either_way(test: ast.expr, ifs: dict[int, ast.If], reacting: set[int]) -> bool:
    """Does the other branch of the ``if`` whose test (or its negation) gates a reaction
    react too (``if stereo_context: <drop NaN losses> else: <drop them too>``)? Then the
    setting chooses between two ways of training, not whether NaNs are hidden."""
    gate = ifs.get(id(test))
    other = gate.orelse if gate is not None else []
    if gate is None:
        gate = getattr(test, "gate", None)
        other = gate.body if gate is not None else []
    lines = {
        line
        for statement in other
        for line in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
    }
    return bool(lines & reacting)


def _decides_both_ways(gate: ast.If | None, flags: set[str | None], line: int) -> bool:
    """Does ``gate`` hold the whole finiteness decision, both ways: an ``if`` on the
    route's flag (or its test, read in place) with a branch for each answer? Then the
    setting gates the step itself (stepping or accumulating), not the reaction to a
    non-finite value; ``if skip_nan: if not isfinite(loss): continue`` has one branch."""
    if gate is None or gate.orelse:
        return False  # ``if skip_nan: <guarded step> else: <plain step>``: the switch decides
    names = {flag for flag in flags if flag}
    for node in (n for statement in gate.body for n in ast.walk(statement)):
        if not (isinstance(node, ast.If) and node.orelse):
            continue
        parts = ast.walk(node.test)
        read = {dotted_name(n) for n in parts if isinstance(n, ast.Name | ast.Attribute)}
        if node.test.lineno == line or read & names:
            return True
    return False


@dataclass(frozen=True)
class _Cleaning:
    """A statement that cleans training signal whatever its values are (``nan_to_num(
    p.grad, out=p.grad)``), read as a reaction a setting may gate (``if force_finite:``)."""

    first: int
    line: int
    route: Any  # ``nozero.lint.facts.flow_types.Route``
    kind: str = "replace"
    scaling: bool = False


def _cleanings(tree: ast.Module, places: dict[int, _Place], facts: FileFacts) -> list[_Cleaning]:
    """The gated statements that hand training signal to a sanitizer (NZ101's sites)."""
    from nozero.lint.facts.flow_types import Route

    found: list[_Cleaning] = []
    gated = {line for line, place in places.items() if place.tests}
    if not gated:
        return found  # only a gated cleaning can be a switch's reaction
    statements: dict[int, ast.stmt] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno in gated:
            statements.setdefault(node.lineno, node)
    for line, statement in statements.items():
        place = places[line]
        if not isinstance(statement, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign):
            continue
        scope = facts.scope(place.function.lineno if place.function else 0)
        for node in ast.walk(statement):
            cleaner = isinstance(node, ast.Call) and _cleaner_of_signal(node, facts, scope)
            if cleaner:
                found.append(_Cleaning(line, line, Route(line, f"{cleaner}()", None, False)))
                break
    return found


def _cleaner_of_signal(call: ast.Call, facts: FileFacts, scope: Scope) -> str | None:
    """The sanitizer ``call`` hands training signal to: called directly (``nan_to_num``),
    or a same-file helper that cleans the parameter it is handed (``_nan_to_num(loss,
    value)``); None when it cleans none."""
    from nozero.lint.facts.scopes import cleaned_subjects

    called = facts.called(call.func)
    if called in vocab.SANITIZERS:
        subjects = cleaned_subjects(call)
        cleans = not facts.hides_nothing(call) and any(facts.is_signal(s, scope) for s in subjects)
        return called if cleans else None
    helper = facts.helper_name(call.func)
    if helper and facts.is_sanitizer_helper(helper) and facts.hands_to_sanitizer(call, scope):
        return helper
    return None


def _forwarded_keys(tree: ast.Module, switches: list[Switch]) -> list[Switch]:
    """The config keys the module's own calls feed its functions' switches from
    (``make_step(..., reset_if_nan=cfg.optim.reset_if_nan)``): setting such a key in a
    config module turns the switch on, so the key is a switch too."""
    by_function: dict[str, list[Switch]] = {}
    for switch in switches:
        by_function.setdefault(switch.function, []).append(switch)
    found = []
    for node in ast.walk(tree) if by_function else ():
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        for switch in by_function.get(called or "", ()):
            argument = _argument_for(node, switch)
            ref = switch_reference(argument, set()) if argument is not None else None
            if ref is not None and ref[0] == "key" and _specific(ref[1]):
                found.append(
                    Switch("key", "", ref[1], -1, switch.line, switch.reaction, switch.scaling)
                )
    return found


def _argument_for(call: ast.Call, switch: Switch) -> ast.expr | None:
    """What ``call`` hands the switch's parameter: by keyword, or by position."""
    for keyword in call.keywords:
        if keyword.arg == switch.name:
            return keyword.value
    if 0 <= switch.position < len(call.args):
        argument = call.args[switch.position]
        return None if isinstance(argument, ast.Starred) else argument
    return None


def _switch_records(ref: tuple[str, str], place: _Place, reaction, tree) -> list[Switch]:  # noqa: ANN001
    kind, name = ref
    fn = place.function
    common = {"line": reaction.line, "reaction": reaction.kind, "scaling": reaction.scaling}
    if kind == "param" and fn is not None:
        # the function whose parameter it is: the innermost of those around the test
        fn = next((f for f in (fn, *place.enclosing) if name in _parameters(f)), fn)
        if fn is not place.function:
            place = _Place(None, fn, place.tests)  # a factory's parameter: its own switch
        positional = _positional(fn)
        position = positional.index(name) if name in positional else -1
        # a parameter named for NaNs (``restart_by_nan``) is matched by name too: it is
        # set through wrappers that hand on ``**kwargs``, config entries and the like
        by_name = [Switch("key", "", name, -1, **common)] if _names_a_nan_setting(name) else []
        if place.cls is None:
            return [Switch("param", fn.name, name, position, **common), *by_name]
        if fn.name == "__init__":
            return [Switch("param", place.cls.name, name, position, **common), *by_name]
        return (
            [Switch("method", fn.name, name, position, **common), *by_name]
            if _specific(name)
            else []
        )
    records = [Switch("key", "", name, -1, **common)] if _specific(name) else []
    if place.cls is not None:
        for init in _inits(place.cls):
            positional = _positional(init)
            for target, value in _self_assignments(init):
                if target == name and value in (
                    *positional,
                    *(a.arg for a in init.args.kwonlyargs),
                ):
                    position = positional.index(value) if value in positional else -1
                    records.append(Switch("param", place.cls.name, value, position, **common))
    return records


def _specific(name: str) -> bool:
    """A name specific enough to be matched across a project (``skip_nan_steps``)."""
    return "_" in name.strip("_") and len(name) >= 6 and name not in _PLAIN_NAMES


def _names_a_nan_setting(name: str) -> bool:
    """A setting named for non-finite values, specific enough to be matched by name
    wherever it is set, whatever function it is handed to."""
    return _specific(name) and vocab.names_nonfinite_values(name)


def _inits(cls: ast.ClassDef) -> list[FunctionNode]:
    return [
        node
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "__init__"
    ]


def _self_assignments(fn: FunctionNode) -> list[tuple[str, str]]:
    """``self.x = name`` in ``fn``'s own statements: (``x``, ``name``)."""
    found = []
    stack: list[ast.AST] = [fn]
    while stack:
        node = stack.pop()
        stack.extend(child_statements(node))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    found.append((target.attr, node.value.id))
    return found
