"""Lint one source text: pre-filters, then libcst on the code that can hold a finding.

The pipeline, cheapest first:

1. text: a file without any trigger word holds no finding; it is only checked for syntax
   (``symtable``, the C parser without building Python objects) for NZ001;
2. ``ast``: the file is parsed once with the standard library (about 10x faster than
   libcst), its imports resolved, and split into units (top-level statements and class
   body statements); only units whose text holds a trigger word or one of this file's
   names for one (an alias, a helper, a flag) are selected;
3. libcst: each selected unit is parsed and the rules' matchers run over it, asking the
   whole-file ``FileFacts`` whether what they matched is training signal.

``shortcuts=False`` skips steps 1 and 2 (libcst parses the whole file); the findings must
be the same, and the test suite checks that they are.
"""

from __future__ import annotations

import ast
import symtable
import warnings
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import libcst as cst

from nozero.lint import prefilter
from nozero.lint.imports import child_statements, collect_aliases, last_part
from nozero.lint.noqa import has_nozero_noqa, noqa_comments
from nozero.lint.rules import ALL_RULES, Rule, get_rule
from nozero.lint.rules.base import Context, Hit
from nozero.lint.signal import FileFacts, FunctionNode
from nozero.lint.vocab import TRIGGER_WORDS

DEFAULT_CODES = frozenset(rule.code for rule in ALL_RULES if rule.default_enabled)
SYNTAX_ERROR = "NZ001"
NOQA_WITHOUT_REASON = "NZ002"


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    col: int  # 1-based, like ruff's output
    code: str
    message: str
    end_line: int = 0


def lint_source(
    source: str,
    path: str = "<stdin>",
    *,
    select: Collection[str] | None = None,
    require_reason: bool = False,
    shortcuts: bool = True,
) -> list[Finding]:
    """Findings for ``source``, sorted, with ``# noqa`` suppressions applied.

    ``select`` is the set of enabled codes (None = the rules enabled by default);
    ``shortcuts=False`` skips the pre-filters, which must never change the findings.
    """
    enabled = DEFAULT_CODES if select is None else frozenset(select)
    rules = [rule() for rule in ALL_RULES if rule.code in enabled and rule.node_types]
    check_reasons = require_reason and NOQA_WITHOUT_REASON in enabled
    if (
        shortcuts
        and not prefilter.could_hold_finding(source)
        and not (check_reasons and has_nozero_noqa(source))
    ):
        error = _syntax_error(source, path, quick=True) if SYNTAX_ERROR in enabled else None
        return [error] if error else []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        error = _syntax_error(source, path, quick=False)
        return [error] if error and SYNTAX_ERROR in enabled else []
    hits = _run_rules(source, tree, rules, shortcuts) if rules else []
    return _apply_noqa(source, path, hits, enabled, require_reason)


def _syntax_error(source: str, path: str, *, quick: bool) -> Finding | None:
    """NZ001 with the parser's message and position, or None when ``source`` parses.

    ``quick`` first tries ``symtable``, which parses without building Python objects; it
    rejects a superset of what ``ast.parse`` rejects, so ``ast.parse`` has the last word.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if quick:
            try:
                symtable.symtable(source, path, "exec")
                return None
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass
        try:
            ast.parse(source, filename=path)
            return None
        except SyntaxError as err:
            line, col, message = err.lineno or 1, err.offset or 1, err.msg
        except (ValueError, RecursionError, MemoryError) as err:
            line, col, message = 1, 1, str(err) or type(err).__name__
    return Finding(path, line, max(col, 1), SYNTAX_ERROR, f"syntax error: {message}", line)


# ---- units and candidates ---------------------------------------------------------------
def _functions_in(nodes: Iterable[ast.stmt]) -> Iterable[FunctionNode]:
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        stack.extend(child_statements(node))


def _candidate_units(
    units: list[prefilter.Unit], lines: list[str], facts: FileFacts
) -> list[prefilter.Unit]:
    """Units whose text holds a trigger word or one of this file's names for one: an
    import alias, a module-level finiteness flag, a helper that sanitizes or tests."""
    names = {local for local, qualified in facts.aliases.items()
             if last_part(qualified) in TRIGGER_WORDS}
    names |= facts.scope(0).flags
    texts = [unit.text(lines) for unit in units]
    while True:
        pattern = prefilter.trigger_pattern(names)
        selected = [u for u, text in zip(units, texts, strict=True)
                    if prefilter.could_hold_finding(text, pattern)]
        helpers = {
            fn.name
            for unit in selected
            for fn in _functions_in(unit.nodes)
            if facts.is_sanitizer_helper(fn.name) or facts.is_predicate_helper(fn.name)
        }
        if helpers <= names:
            return selected
        names |= helpers


# ---- libcst ---------------------------------------------------------------------------
class _Dispatcher(cst.CSTVisitor):
    """One walk over a unit, handing each node to the rules that inspect its type."""

    def __init__(self, rules: list[Rule], ctx: Context) -> None:
        self.ctx = ctx
        self.by_type: dict[type[cst.CSTNode], list[Rule]] = {}
        for rule in rules:
            for node_type in rule.node_types:
                self.by_type.setdefault(node_type, []).append(rule)

    def on_visit(self, node: cst.CSTNode) -> bool:
        for rule in self.by_type.get(type(node), ()):
            rule.check(node, self.ctx)
        self.ctx.ancestors.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.ctx.ancestors.pop()


def _visit(text: str, line_offset: int, rules: list[Rule], facts: FileFacts) -> list[Hit]:
    try:
        module = cst.parse_module(text)
    except (cst.ParserSyntaxError, RecursionError):
        return []  # ``ast`` accepted the file; libcst cannot check this part
    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    ctx = Context(module, wrapper, facts, line_offset)
    module.visit(_Dispatcher(rules, ctx))
    return ctx.hits


def _visit_unit(unit: prefilter.Unit, lines: list[str], rules: list[Rule],
                facts: FileFacts) -> list[Hit]:
    text = unit.text(lines)
    if not unit.nested:
        return _visit(text, unit.first - 1, rules, facts)
    first_line = lines[unit.first - 1]
    newline = first_line[len(first_line.rstrip("\r\n")):] or "\n"
    return _visit(f"if 1:{newline}{text}", unit.first - 2, rules, facts)


def _run_rules(source: str, tree: ast.Module, rules: list[Rule], shortcuts: bool) -> list[Hit]:
    facts = FileFacts(tree, source, collect_aliases(tree))
    lines = prefilter.split_lines(source)
    units = prefilter.split_units(tree, lines)
    if shortcuts:
        units = _candidate_units(units, lines, facts)
    else:
        try:
            cst.parse_module(source)
        except (cst.ParserSyntaxError, RecursionError):
            pass  # libcst rejects some part: check unit by unit, as the shortcuts do
        else:
            return _visit(source, 0, rules, facts)
    return [hit for unit in units for hit in _visit_unit(unit, lines, rules, facts)]


# ---- suppressions -------------------------------------------------------------------
def _apply_noqa(
    source: str, path: str, hits: list[Hit], enabled: frozenset[str], require_reason: bool
) -> list[Finding]:
    check_reasons = require_reason and NOQA_WITHOUT_REASON in enabled
    comments = noqa_comments(source) if hits or check_reasons else {}
    findings: set[Finding] = set()
    unexplained = [c for c in comments.values() if check_reasons and c.codes and not c.reason]
    for hit in hits:
        noqa = next(
            (
                comments[line]
                for line in (hit.statement_first, hit.line, hit.statement_last)
                if line in comments and comments[line].covers(hit.code)
            ),
            None,
        )
        if noqa is not None and not (require_reason and not noqa.reason):
            continue
        findings.add(Finding(path, hit.line, hit.col, hit.code, hit.message, hit.statement_last))
        if noqa is not None:
            unexplained.append(noqa)
    message = get_rule(NOQA_WITHOUT_REASON).message
    findings |= {
        Finding(path, noqa.line, noqa.col, NOQA_WITHOUT_REASON, message, noqa.line)
        for noqa in unexplained
        if check_reasons and (noqa.codes is None or any(c.startswith("NZ") for c in noqa.codes))
    }
    return sorted(findings)

