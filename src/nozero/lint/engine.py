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
import gc
import symtable
import warnings
from collections.abc import Collection

import libcst as cst

from nozero.lint import prefilter
from nozero.lint.finding import Finding
from nozero.lint.imports import collect_aliases, last_part
from nozero.lint.noqa import has_nozero_noqa, noqa_comments
from nozero.lint.rules import ALL_RULES, Rule, get_rule
from nozero.lint.rules.base import Context, Hit, children
from nozero.lint.signal import FileFacts, FunctionNode
from nozero.lint.vocab import TRIGGER_WORDS

DEFAULT_CODES = frozenset(rule.code for rule in ALL_RULES if rule.default_enabled)
SYNTAX_ERROR = "NZ001"
NOQA_WITHOUT_REASON = "NZ002"




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
    collecting = gc.isenabled()
    gc.disable()  # parse trees are acyclic; collections mid-parse cost a third of the time
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the linted code's own invalid escapes etc.
            return _lint(source, path, select, require_reason, shortcuts)
    finally:
        if collecting:
            gc.enable()


def _lint(
    source: str,
    path: str,
    select: Collection[str] | None,
    require_reason: bool,
    shortcuts: bool,
) -> list[Finding]:
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
def _candidate_units(
    source: str, units: list[prefilter.Unit], lines: list[str], facts: FileFacts
) -> list[prefilter.Unit]:
    """The parts of the file libcst must see: units whose text holds a trigger word or
    one of this file's names for one (an import alias, a finiteness flag, a helper that
    sanitizes or tests), narrowed to the statements holding them. Finding the helpers and
    flags needs the functions that hold triggers, hence the fixed point."""
    names = set(TRIGGER_WORDS) | facts.scope(0).flags
    names |= {local for local, qualified in facts.aliases.items()
              if last_part(qualified) in TRIGGER_WORDS}
    triggers = prefilter.TriggerLines(source, lines)
    triggers.add_words(names - TRIGGER_WORDS)
    while True:
        frozen = frozenset(names)
        selected: list[prefilter.Unit] = []
        holders: set[FunctionNode] = set()
        for unit in units:
            if triggers.could_hold_finding(unit.first, unit.last):
                pieces, functions = prefilter.narrow(unit, lines, frozen, triggers)
                selected += pieces
                holders |= functions
        found = {
            fn.name
            for fn in holders
            if facts.is_sanitizer_helper(fn.name) or facts.is_predicate_helper(fn.name)
        }
        for fn in holders:  # ``ok = isfinite(loss)`` ... ``where(ok, new, old)``
            found |= facts.scope(fn.lineno).flags
        if found <= names:
            return selected
        triggers.add_words(found - names)
        names |= found


# ---- libcst ---------------------------------------------------------------------------
def _dispatch(module: cst.Module, rules: list[Rule], ctx: Context, def_lines: list[int]) -> None:
    """Hand each node of ``module`` to the rules that inspect its type, keeping the
    context's ancestors and enclosing functions up to date."""
    by_type: dict[type[cst.CSTNode], list[Rule]] = {}
    for rule in rules:
        for node_type in rule.node_types:
            by_type.setdefault(node_type, []).append(rule)
    lines = iter(def_lines)  # libcst meets the defs in source order, as ``ast`` lists them
    stack: list[tuple[cst.CSTNode, bool]] = [(module, True)]
    while stack:
        node, entering = stack.pop()
        if not entering:
            ctx.ancestors.pop()
            if isinstance(node, cst.FunctionDef):
                ctx.scopes.pop()
            continue
        if isinstance(node, cst.FunctionDef):
            ctx.scopes.append(next(lines))
        for rule in by_type.get(type(node), ()):
            rule.check(node, ctx)
        ctx.ancestors.append(node)
        stack.append((node, False))
        stack.extend((child, True) for child in reversed(children(node)))


def _visit(
    text: str,
    line_offset: int,
    def_lines: list[int],
    rules: list[Rule],
    facts: FileFacts,
    enclosing: int = 0,
) -> list[Hit]:
    try:
        module = cst.parse_module(text)
    except (cst.ParserSyntaxError, RecursionError):
        return []  # ``ast`` accepted the file; libcst cannot check this part
    ctx = Context(module, facts, line_offset)
    if enclosing:
        ctx.scopes.append(enclosing)
    _dispatch(module, rules, ctx, def_lines)
    return ctx.hits


def _visit_unit(unit: prefilter.Unit, lines: list[str], rules: list[Rule],
                facts: FileFacts) -> list[Hit]:
    text = unit.text(lines)
    def_lines = [fn.lineno for fn in unit.functions()]
    if not unit.nested:
        return _visit(text, unit.first - 1, def_lines, rules, facts)
    first_line = lines[unit.first - 1]
    newline = first_line[len(first_line.rstrip("\r\n")):] or "\n"
    return _visit(
        f"if 1:{newline}{text}", unit.first - 2, def_lines, rules, facts, unit.enclosing
    )


def _run_rules(source: str, tree: ast.Module, rules: list[Rule], shortcuts: bool) -> list[Hit]:
    facts = FileFacts(tree, source, collect_aliases(tree))
    lines = prefilter.split_lines(source)
    units = prefilter.split_units(tree, lines)
    if shortcuts:
        units = _candidate_units(source, units, lines, facts)
    else:
        whole = prefilter.Unit(1, len(lines), tree.body, False)
        try:
            cst.parse_module(source)
        except (cst.ParserSyntaxError, RecursionError):
            pass  # libcst rejects some part: check unit by unit, as the shortcuts do
        else:
            return _visit(source, 0, [fn.lineno for fn in whole.functions()], rules, facts)
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

