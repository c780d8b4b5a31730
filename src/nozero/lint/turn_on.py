"""Where a file turns on a switch that another part of the project reacts to.

A switch is a parameter, attribute or config key that gates a skip, a zeroing, a
replacement or old state kept (``nozero.lint.summary``). It is turned on by a true
literal: a call's argument (``fit(..., skip_nan_batches=True)``, ``Trainer(model, True)``),
a dict entry (``{"zero_nan_grads": True}``), an assignment (``cfg.zero_nan_grads =
True``, ``zero_nan_grads: bool = True`` in a config class or module) or a command-line
default (``add_argument("--zero-nan-grads", default=True)``). The finding is reported
there, with the route: the switch's name and the file and line of its reaction.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

from nozero.lint.facts.flows import WHAT
from nozero.lint.facts.scopes import parameter_defaults
from nozero.lint.imports import dotted_name
from nozero.lint.project import Route, View
from nozero.lint.rules.base import Hit
from nozero.lint.rules.flow import FlowRule


def turn_on_hits(tree: ast.Module, view: View, rules: Sequence[FlowRule]) -> list[Hit]:
    """One hit per site that sets a switch of ``view`` to a true literal."""
    hits: dict[tuple[int, int, str], Hit] = {}
    for statement, node in _expressions(tree):
        for site, routes in _sites(node, view):
            for switch, where in routes:
                rule = next(
                    (
                        r
                        for r in rules
                        if switch.reaction in r.kinds and switch.scaling == r.scaling
                    ),
                    None,
                )
                if rule is None:
                    continue
                what = WHAT.get(switch.reaction, "the value is hidden there")
                message = (
                    f"{rule.message} ({switch.name} turned on here; {what.replace(' here', '')}"
                    f" at {where}:{switch.line})"
                )
                # a default in a signature is its own statement, not the whole ``def``
                around = site if isinstance(statement, _DEFINITIONS) else statement
                first, last = around.lineno, around.end_lineno or around.lineno
                hit = Hit(site.lineno, site.col_offset + 1, rule.code, message, first, last)
                hits.setdefault((hit.line, hit.col, hit.code), hit)
    return list(hits.values())


def _expressions(tree: ast.Module) -> Iterator[tuple[ast.stmt, ast.AST]]:
    """(innermost statement, node) for every node of the file."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            statement = node
            yield statement, node
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt | ast.excepthandler | ast.match_case):
                    stack.append(child)
                else:
                    yield from ((statement, n) for n in ast.walk(child))
        else:
            stack.extend(ast.iter_child_nodes(node))


def _true(node: ast.expr | None) -> bool:
    if not isinstance(node, ast.Constant):
        return False
    value = node.value
    return value is True or (type(value) in (int, float) and value != 0)


def _sites(node: ast.AST, view: View) -> Iterator[tuple[ast.AST, tuple[Route, ...]]]:
    if isinstance(node, ast.Call):
        yield from _call_sites(node, view)
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        yield from _default_sites(node, view.calls.get(node.name, ()))
    elif isinstance(node, ast.ClassDef):
        for init in node.body:
            if isinstance(init, ast.FunctionDef) and init.name == "__init__":
                yield from _default_sites(init, view.calls.get(node.name, ()))
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value in view.keys and _true(value):
                yield key, view.keys[key.value]
    elif isinstance(node, ast.Assign | ast.AnnAssign) and _true(_assigned(node)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = _target_name(target)
            if name in view.keys:
                yield target, view.keys[name]


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _default_sites(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, routes: tuple[Route, ...]
) -> Iterator[tuple[ast.AST, tuple[Route, ...]]]:
    """A switch of ``fn`` whose default is true (``def training_loop(...,
    force_finite=True)``): every call that leaves it out turns the reaction on."""
    defaults = parameter_defaults(fn)
    for switch, where in routes:
        default = defaults.get(switch.name)
        if switch.kind == "param" and _true(default):
            yield default, ((switch, where),)


def _assigned(node: ast.Assign | ast.AnnAssign) -> ast.expr | None:
    """The value, or a dataclass field's default (``field(default=True)``)."""
    value = node.value
    if isinstance(value, ast.Call) and dotted_name(value.func) in ("field", "dataclasses.field"):
        return next((k.value for k in value.keywords if k.arg == "default"), None)
    return value


def _target_name(target: ast.expr) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript):
        key = target.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    return None


def _call_sites(call: ast.Call, view: View) -> Iterator[tuple[ast.AST, tuple[Route, ...]]]:
    callee = dotted_name(call.func) or ""
    routes = view.calls.get(callee, ())
    for switch, where in routes:
        for keyword in call.keywords:
            if keyword.arg == switch.name and _true(keyword.value):
                yield keyword, ((switch, where),)
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        if 0 <= switch.position < len(positional) and _true(positional[switch.position]):
            yield positional[switch.position], ((switch, where),)
    if routes:
        return
    if isinstance(call.func, ast.Attribute) and call.func.attr in view.methods:
        for switch, where in view.methods[call.func.attr]:
            for keyword in call.keywords:
                if keyword.arg == switch.name and _true(keyword.value):
                    yield keyword, ((switch, where),)
    for keyword in call.keywords:
        if keyword.arg in view.keys and _true(keyword.value):
            yield keyword, view.keys[keyword.arg]
    flag = call.args[0] if call.args else None
    if (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "add_argument"
        and isinstance(flag, ast.Constant)
        and isinstance(flag.value, str)
    ):
        name = flag.value.lstrip("-").replace("-", "_")
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        if name in view.keys and _true(default):
            yield flag, view.keys[name]
