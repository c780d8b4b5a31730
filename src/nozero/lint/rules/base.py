"""What a rule is, and what it may ask about the code it inspects.

A rule names the libcst node types it inspects and, for each such node, reports through
the ``Context``. The context answers three kinds of question: what a name stands for
(through the file's imports), whether an expression is training signal or a finiteness
test on it (the whole-file ``FileFacts``), and where a node is.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import ClassVar

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider

from nozero.lint import catalog, vocab
from nozero.lint.facts.scopes import FileFacts
from nozero.lint.imports import last_part, resolve
from nozero.lint.lines import line_starts, split_lines

_INDENTATION = " \t\x0c"


@dataclass(frozen=True)
class Hit:
    """A finding before suppression: the node's position and its statement's lines."""

    line: int
    col: int
    code: str
    message: str
    statement_first: int
    statement_last: int


class Example(str):
    """A VALID or INVALID example: dedented code, and for an INVALID one the line its
    finding is expected on (its code is the rule's)."""

    line: int | None

    def __new__(cls, source: str, line: int | None = None) -> Example:
        example = super().__new__(cls, textwrap.dedent(source))
        example.line = line
        return example


class Rule:
    """One concern, with the examples the test suite runs. Its code names its entry in
    the catalogue, where its name, message, page text and default live."""

    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    doc: ClassVar[str]
    default_enabled: ClassVar[bool] = True
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []  # Example(..., line=N) names its line

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            entry = catalog.entry(cls.code)
            cls.name, cls.message, cls.doc = entry.name, entry.message, entry.doc
            cls.default_enabled = entry.default
        visited = sorted(name[len("visit_") :] for name in dir(cls) if name.startswith("visit_"))
        cls.node_types = tuple(getattr(cst, name) for name in visited)

    # libcst node types the rule has a ``visit_<Node>`` method for (set from those
    # methods); empty for rules the engine applies itself.
    node_types: ClassVar[tuple[type[cst.CSTNode], ...]] = ()

    def visitor(self, node_type: type[cst.CSTNode]) -> Callable[[cst.CSTNode, Context], None]:
        """The method that inspects nodes of ``node_type``."""
        return getattr(self, f"visit_{node_type.__name__}")


def cst_dotted_name(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = cst_dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


class Context:
    """Everything a rule may ask while one unit of code is visited."""

    def __init__(self, module: cst.Module, facts: FileFacts, line_offset: int) -> None:
        self.module = module
        self.facts = facts
        self.line_offset = line_offset
        self.ancestors: list[cst.CSTNode] = []
        self.scopes: list[int] = []  # def lines of the enclosing functions
        self.hits: list[Hit] = []

    @cached_property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        """Node positions, computed on the first report only: they cost a full code
        generation of the unit, and most units report nothing."""
        wrapper = cst.MetadataWrapper(self.module, unsafe_skip_copy=True)
        return wrapper.resolve(PositionProvider)

    # ---- names ----------------------------------------------------------------------
    def qualified(self, node: cst.CSTNode) -> str | None:
        dotted = cst_dotted_name(node)
        return resolve(dotted, self.facts.aliases) if dotted else None

    def called(self, call: cst.Call) -> str:
        """Last component of what ``call`` calls (``jnp.nan_to_num`` -> nan_to_num),
        through the file's imports; the method name for ``x.method()``."""
        if isinstance(call.func, cst.Attribute):
            return last_part(self.qualified(call.func)) or call.func.attr.value
        return last_part(self.qualified(call.func))

    def helper_called(self, call: cst.Call) -> str | None:
        """The same-file function ``call`` calls, or the project's helper it reaches (an
        imported function, a method inherited from another module's class), if any."""
        func = call.func
        if isinstance(func, cst.Name):
            return func.value if self.facts.defines_function(func.value) else None
        if isinstance(func, cst.Attribute) and cst_dotted_name(func.value) in ("self", "cls"):
            return self.facts.method_helper(func.attr.value)
        return None

    # ---- meaning --------------------------------------------------------------------
    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    @property
    def scope_key(self) -> int:
        """Line of the innermost enclosing ``def`` (0: module level)."""
        return self.scopes[-1] if self.scopes else 0

    def is_signal(self, node: cst.BaseExpression) -> bool:
        return self.facts.code_is_signal(self.code(node), self.scope_key)

    def is_nonfinite_test(self, node: cst.BaseExpression) -> bool:
        return self.facts.code_is_nonfinite_test(self.code(node), self.scope_key)

    def true_only_where_finite(self, node: cst.BaseExpression) -> bool:
        """Is the mask ``node`` true only at finite values (``isfinite(x)``, ``ok & ~isnan(x)``)?"""
        return self.facts.code_true_only_where_finite(self.code(node), self.scope_key)

    def in_loop(self) -> bool:
        """Is the current node inside a ``for`` or ``while`` of its own function?"""
        for ancestor in reversed(self.ancestors):
            if isinstance(ancestor, cst.For | cst.While):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                return False
        return False

    def scope_is_guarded(self) -> bool:
        """Does the enclosing function raise, or record the failure for a raise?"""
        return self.facts.is_guarded(self.scope_key)

    # ---- reporting ------------------------------------------------------------------
    def _source_column(self, line: int, column: int) -> int:
        """libcst's ``column`` on the unit's ``line``, as a column of the file's own line.

        libcst measures columns in the code it generates, which may drop a form feed
        from a line's indentation (depending on the lines around it, so a unit and the
        whole file would disagree). The rest of the line is the same text: the column
        moves by the difference between the two indentations."""
        source = self.facts.source
        starts = line_starts(source)
        number = line + self.line_offset
        if not 0 < number < len(starts):
            return column
        own = source[starts[number - 1] : starts[number]]
        indent = len(own) - len(own.lstrip(_INDENTATION))
        if "\x0c" not in own[:indent] or line > len(self._generated_lines):
            return column
        generated = self._generated_lines[line - 1]
        generated_indent = len(generated) - len(generated.lstrip(_INDENTATION))
        return column - generated_indent + indent if column >= generated_indent else column

    @cached_property
    def _generated_lines(self) -> list[str]:
        return split_lines(self.module.code)

    def report(self, node: cst.CSTNode, rule: Rule, detail: str = "") -> None:
        start = self.positions[node].start
        if self.facts.only_observes(
            self.scope_key, start.line + self.line_offset
        ) or self.facts.in_test(self.scope_key):
            return  # evaluation, metrics, plots and tests touch no training signal
        statement = next(
            (a for a in reversed([*self.ancestors, node]) if isinstance(a, cst.BaseStatement)),
            node,
        )
        span = self.positions[statement]
        last = span.end.line if isinstance(statement, cst.SimpleStatementLine) else start.line
        message = f"{rule.message} ({detail})" if detail else rule.message
        self.hits.append(
            Hit(
                start.line + self.line_offset,
                self._source_column(start.line, start.column) + 1,
                rule.code,
                message,
                span.start.line + self.line_offset,
                last + self.line_offset,
            )
        )


def raises(node: cst.CSTNode, ctx: Context) -> bool:
    """Does ``node`` raise, assert, exit, or call a check or a same-file function that
    raises (on some path: a helper that re-raises when out of retries counts)?"""
    for child in walk(node):
        if isinstance(child, cst.Raise | cst.Assert):
            return True
        if isinstance(child, cst.Call):
            called = ctx.called(child)
            if called in vocab.RAISING_CALLS:
                return True
            # a same-file function or method that raises (``run.halted(err)`` re-raising)
            if ctx.facts.defines_function(called) and ctx.facts.is_raising_helper(called):
                return True
    return False


@cache
def _child_fields(node_type: type[cst.CSTNode]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(node_type))


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """A node's children in source order, read from its fields. libcst's own visitor
    (and ``node.children``) rebuild every node they pass, being transformers underneath,
    and cost about three times as much; rules only read."""
    found: list[cst.CSTNode] = []
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(v for v in value if isinstance(v, cst.CSTNode))
    return found


def is_literal(node: cst.CSTNode, *texts: str) -> bool:
    """Is ``node`` the name or integer literal written as one of ``texts`` (``None``,
    ``False``, ``0``)? (Plain checks: ``libcst.matchers`` costs a third of a second to
    import, more than the rest of a one-file run.)"""
    return isinstance(node, cst.Name | cst.Integer) and node.value in texts


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it, without entering nested functions or classes."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current is node or not isinstance(current, cst.FunctionDef | cst.ClassDef):
            stack.extend(reversed(children(current)))
