"""Resolve names through a file's imports: ``xp.nan_to_num`` -> ``jax.numpy.nan_to_num``.

libcst's ``QualifiedNameProvider`` does this with full scope analysis, which costs seconds
on a large file; rules only need "which module does this dotted name come from", so one
flow-insensitive pass over the import statements is enough (a local rebinding of an
imported name is not followed).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator


def collect_aliases(tree: ast.AST) -> dict[str, str]:
    """Map each name an import binds anywhere in ``tree`` to the qualified name it stands for."""
    aliases: dict[str, str] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        stack.extend(child_statements(node))
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # ``import a.b`` binds ``a``
                    root = alias.name.split(".", 1)[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


# Statements with a body of statements (the rest hold none, and are not searched).
BLOCK_STATEMENTS = (
    ast.Module,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.TryStar,
    ast.Match,
)


def child_statements(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements directly nested in ``node`` (bodies, branches, handlers, cases):
    imports and definitions are statements, and walking statements only is far cheaper
    than walking every expression."""
    if not isinstance(node, BLOCK_STATEMENTS):
        return
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, name, ()):
            if isinstance(child, ast.excepthandler | ast.match_case):
                yield from child.body
            elif isinstance(child, ast.stmt):
                yield child


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def resolve(dotted: str, aliases: dict[str, str]) -> str:
    """Replace the first component of ``dotted`` by what an import bound it to."""
    root, _, rest = dotted.partition(".")
    target = aliases.get(root)
    if target is None:
        return dotted
    return f"{target}.{rest}" if rest else target


def last_part(qualified: str | None) -> str:
    """The final component of a dotted name ('' for None)."""
    return qualified.rsplit(".", 1)[-1] if qualified else ""
