"""Lint one source text: pre-filters, then libcst on the code that can hold a finding.

The pipeline, cheapest first:

1. text: a file without any trigger word holds no finding and is not parsed at all
   (not even for NZ001: such a file is not nozero's to parse);
2. ``ast``: the file is parsed once with the standard library (about 10x faster than
   libcst), its imports resolved, and split into units (top-level statements and class
   body statements); only units whose text holds a trigger word or one of this file's
   names for one (an alias, a helper, a flag) are selected;
3. libcst: each selected unit is parsed and the rules' visitors run over it, asking the
   whole-file ``FileFacts`` whether what they matched is training signal.

``shortcuts=False`` skips steps 1 and 2 (libcst parses the whole file); the findings must
be the same, and the test suite checks that they are.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Collection, Iterator

import libcst as cst

from nozero.lint import prefilter
from nozero.lint.facts import file_facts, reactions
from nozero.lint.facts.scopes import FileFacts
from nozero.lint.files import is_test_module
from nozero.lint.finding import Finding
from nozero.lint.lines import split_lines
from nozero.lint.noqa import noqa_comments
from nozero.lint.project import View
from nozero.lint.rules import ALL_RULES, Rule, get_rule
from nozero.lint.rules.base import Context, Hit, children
from nozero.lint.rules.flow import FlowRule
from nozero.lint.summary import Summary, summarize, summarize_facts

DEFAULT_CODES = frozenset(rule.code for rule in ALL_RULES if rule.default_enabled)
SYNTAX_ERROR = "NZ001"
NOQA_WITHOUT_REASON = "NZ002"
# libcst's metadata and the facts' walkers recurse once per level of an expression: a
# long chain (``a + a + ... + b``, generated tables) needs more than Python's default
# 1000 frames. Linting runs in a thread with this stack and recursion limit, so such
# files are linted (up to the depth CPython's own parser accepts). The environment
# variable ``NOZERO_LINT_RECURSION_LIMIT`` sets another limit: a low one makes a deep
# expression fail inside libcst for real, which is how the tests reach the report of an
# internal error.
# A line holding only a backslash joins the next line to it: libcst then places the
# statement on the backslash's line, ``ast`` (and the units) on its first token's. Such
# a file is checked unit by unit without the shortcuts too, so both ways agree.
_LEADING_CONTINUATION = re.compile(r"^[ \t\f]*\\\r?$", re.MULTILINE)
DEEP_STACK_BYTES = 512 * 1024 * 1024
DEEP_RECURSION_LIMIT = 20_000
RECURSION_LIMIT_VARIABLE = "NOZERO_LINT_RECURSION_LIMIT"


def lint_source(
    source: str,
    path: str = "<stdin>",
    *,
    select: Collection[str] | None = None,
    require_reason: bool = False,
    shortcuts: bool = True,
    view: View | None = None,
    unsuppressed: list[Finding] | None = None,
) -> list[Finding]:
    """Findings for ``source``, sorted, with ``# noqa`` suppressions applied.

    ``select`` is the set of enabled codes (None = the rules enabled by default);
    ``shortcuts=False`` skips the pre-filters, which must never change the findings;
    ``view``: what the file sees of its project (imported helpers, switches it can turn
    on), from ``nozero.lint.project``; ``unsuppressed``, if given, receives every rule's
    finding before the ``# noqa`` comments are applied (what each comment could suppress).
    """
    with _linting():
        return _deep(
            lambda: _lint(source, path, select, require_reason, shortcuts, view, None, unsuppressed)
        )


def lint_and_summarize(
    source: str, path: str, *, select: Collection[str] | None = None, require_reason: bool = False
) -> tuple[list[Finding], Summary]:
    """``lint_source`` without a view, and the file's summary for the rest of its project,
    from one parse and one set of facts."""
    captured: list[Summary] = []

    def summarize_too(tree: ast.Module, facts: FileFacts) -> None:
        captured.append(summarize_facts(tree, source, facts, path))

    with _linting():
        findings = _deep(
            lambda: _lint(source, path, select, require_reason, True, None, summarize_too)
        )
        summary = captured[0] if captured else _deep(lambda: [summarize(source, path)])[0]
    return findings, summary


@contextlib.contextmanager
def _linting() -> Iterator[None]:
    """The garbage collector off (parse trees are acyclic; collections mid-parse cost a
    third of the time) and the linted code's own warnings (invalid escapes) silenced."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if collecting:
            gc.enable()


def _deep(work: Callable[[], list]) -> list:
    """``work()`` in a thread with ``DEEP_STACK_BYTES`` of stack and the recursion limit
    raised to ``DEEP_RECURSION_LIMIT`` (both restored after); its exception re-raised."""
    outcome: list[list[Finding]] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as err:  # noqa: BLE001 - handed to the calling thread
            failure.append(err)

    limit = sys.getrecursionlimit()
    with _STACK_LOCK:
        size = threading.stack_size(DEEP_STACK_BYTES)
        try:
            thread = threading.Thread(target=run, name="nozero-lint")
            thread.start()
        finally:
            threading.stack_size(size)
    configured = os.environ.get(RECURSION_LIMIT_VARIABLE, "")
    sys.setrecursionlimit(
        int(configured) if configured.isdigit() else max(limit, DEEP_RECURSION_LIMIT)
    )
    try:
        thread.join()
    finally:
        sys.setrecursionlimit(limit)
    if failure:
        raise failure[0]
    return outcome[0]


_STACK_LOCK = threading.Lock()


def _lint(
    source: str,
    path: str,
    select: Collection[str] | None,
    require_reason: bool,
    shortcuts: bool,
    view: View | None = None,
    on_facts: Callable[[ast.Module, FileFacts], None] | None = None,
    unsuppressed: list[Finding] | None = None,
) -> list[Finding]:
    enabled = DEFAULT_CODES if select is None else frozenset(select)
    rules = [rule() for rule in ALL_RULES if rule.code in enabled and rule.node_types]
    flow_rules = [r() for r in ALL_RULES if r.code in enabled and issubclass(r, FlowRule)]
    check_reasons = require_reason and NOQA_WITHOUT_REASON in enabled
    # A file without trigger text is not nozero's to parse (NZ001's page): Python and
    # other linters check its syntax. Neither is a test module, where nothing is
    # reported (its suppression comments still are). Without the shortcuts the rules
    # still see both.
    test_module = is_test_module(path)
    concerns_nozero = not test_module and (
        prefilter.concerns_nozero(source, check_reasons) or bool(view)
    )
    if shortcuts and not concerns_nozero:
        return _apply_noqa(source, path, [], enabled, require_reason) if test_module else []
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        error = _syntax_error(source, path, err) if concerns_nozero else None
        return [error] if error and SYNTAX_ERROR in enabled else []
    hits = (
        _run_rules(source, tree, rules, flow_rules, shortcuts, test_module, view, on_facts)
        if rules or flow_rules
        else []
    )
    if unsuppressed is not None:
        unsuppressed += (_finding(path, hit) for hit in hits)
    return _apply_noqa(source, path, hits, enabled, require_reason)


def _finding(path: str, hit: Hit) -> Finding:
    return Finding(path, hit.line, hit.col, hit.code, hit.message, hit.statement_last)


def _syntax_error(source: str, path: str, err: Exception) -> Finding | None:
    """NZ001 with the parser's message and position, or None when ``source`` is valid
    newer Python than the running interpreter's ``ast`` reads (PEP 695 ``type X = ...``
    and generics, PEP 701 f-strings on 3.11): libcst's grammar accepts those."""
    if isinstance(err, SyntaxError):
        try:
            cst.parse_module(source, config=cst.PartialParserConfig(python_version="3.13"))
            return None
        except (cst.ParserSyntaxError, RecursionError):
            pass
        line, col, message = err.lineno or 1, err.offset or 1, err.msg
    else:
        line, col, message = 1, 1, str(err) or type(err).__name__
    return Finding(path, line, max(col, 1), SYNTAX_ERROR, f"syntax error: {message}", line)


# ---- libcst ---------------------------------------------------------------------------
def _dispatch(module: cst.Module, rules: list[Rule], ctx: Context, def_lines: list[int]) -> None:
    """Hand each node of ``module`` to the rules that inspect its type, keeping the
    context's ancestors and enclosing functions up to date."""
    by_type: dict[type[cst.CSTNode], list[Callable[[cst.CSTNode, Context], None]]] = {}
    for rule in rules:
        for node_type in rule.node_types:
            by_type.setdefault(node_type, []).append(rule.visitor(node_type))
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
        for visit in by_type.get(type(node), ()):
            visit(node, ctx)
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


def _visit_unit(
    unit: prefilter.Unit, lines: list[str], rules: list[Rule], facts: FileFacts
) -> list[Hit]:
    text = unit.text(lines)
    def_lines = [fn.lineno for fn in unit.functions()]
    if not unit.nested:
        return _visit(text, unit.first - 1, def_lines, rules, facts)
    first_line = lines[unit.first - 1]
    newline = first_line[len(first_line.rstrip("\r\n")) :] or "\n"
    return _visit(f"if 1:{newline}{text}", unit.first - 2, def_lines, rules, facts, unit.enclosing)


def _run_rules(
    source: str,
    tree: ast.Module,
    rules: list[Rule],
    flow_rules: list[FlowRule],
    shortcuts: bool,
    test_module: bool,
    view: View | None,
    on_facts: Callable[[ast.Module, FileFacts], None] | None = None,
) -> list[Hit]:
    imported = view.helpers if view else None
    facts = file_facts(tree, source, test_module=test_module, imported=imported)
    lines = split_lines(source)
    flow_hits = _flow_hits(facts, flow_rules, lines) if flow_rules else []
    if on_facts is not None:
        on_facts(tree, facts)
    if view and flow_rules and not test_module:
        from nozero.lint.turn_on import turn_on_hits

        flow_hits += turn_on_hits(tree, view, flow_rules)
    if not rules:
        return flow_hits
    return _one_per_site(flow_hits, _node_hits(source, tree, rules, shortcuts, facts, lines))


def _one_per_site(flow_hits: list[Hit], node_hits: list[Hit]) -> list[Hit]:
    """One site, one finding: a statement a rule matched by its shape (``loss =
    nan_to_num(loss)``, NZ101) is not reported again as the flow's reaction (NZ106), and
    a statement that matches one rule twice (``a.nan_to_num(0) - b.nan_to_num(0)``) is
    reported once, at its first match."""
    matched = {(hit.statement_first, hit.statement_last) for hit in node_hits}
    hits = [hit for hit in flow_hits if (hit.statement_first, hit.statement_last) not in matched]
    seen: set[tuple[int, int, str]] = set()
    for hit in sorted(node_hits, key=lambda h: (h.line, h.col)):
        key = (hit.statement_first, hit.statement_last, hit.code)
        if key not in seen:
            seen.add(key)
            hits.append(hit)
    return hits


def _flow_hits(facts: FileFacts, rules: list[FlowRule], lines: list[str]) -> list[Hit]:
    """The flow pass's reactions, each given to the one rule that takes its kind."""
    hits = []
    for reaction in reactions(facts):
        rule = next((r for r in rules if r.takes(reaction)), None)
        if rule is None:
            continue
        text = lines[reaction.line - 1] if reaction.line <= len(lines) else ""
        col = len(text.encode()[: reaction.col].decode(errors="replace")) + 1
        message = f"{rule.message} ({reaction.detail()})"
        hits.append(Hit(reaction.line, col, rule.code, message, reaction.first, reaction.last))
    return hits


def _node_hits(
    source: str,
    tree: ast.Module,
    rules: list[Rule],
    shortcuts: bool,
    facts: FileFacts,
    lines: list[str],
) -> list[Hit]:
    """The libcst rules, on the candidate units (or, without shortcuts, the whole file)."""
    units = prefilter.split_units(tree, lines)
    if shortcuts:
        units = prefilter.candidate_units(source, units, lines, facts)
    elif not _LEADING_CONTINUATION.search(source):
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
        findings.add(_finding(path, hit))
        if noqa is not None:
            unexplained.append(noqa)
    message = get_rule(NOQA_WITHOUT_REASON).message
    findings |= {
        Finding(path, noqa.line, noqa.col, NOQA_WITHOUT_REASON, message, noqa.line)
        for noqa in unexplained
        if check_reasons and (noqa.codes is None or any(c.startswith("NZ") for c in noqa.codes))
    }
    return sorted(findings)
