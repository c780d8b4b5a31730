"""The engine's contract: parse errors as findings, ``# noqa``, selection, positions, and
findings that never depend on the pre-filters."""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import optax
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nozero.lint import prefilter, vocab
from nozero.lint.engine import DEEP_RECURSION_LIMIT, DEFAULT_CODES, Finding, lint_source
from nozero.lint.lines import split_lines
from nozero.lint.rules import ALL_RULES

from .conftest import DEEP_SOURCE

EVERY_CODE = frozenset(rule.code for rule in ALL_RULES)
BAD = (
    "import jax.numpy as jnp\n\ndef step(grads):\n    grads = jnp.nan_to_num(grads){}\n"
    "    return grads\n"
)


@pytest.mark.parametrize("shortcuts", [True, False])
def test_an_expression_nested_past_the_default_recursion_limit_is_linted(shortcuts):
    [finding] = lint_source(DEEP_SOURCE, "deep.py", shortcuts=shortcuts)
    assert (finding.line, finding.code) == (2, "NZ101")
    assert sys.getrecursionlimit() < DEEP_RECURSION_LIMIT  # raised only while linting


def test_finding_fields_and_positions():
    [finding] = lint_source(BAD.format(""), "pkg/train.py")
    assert finding == Finding("pkg/train.py", 4, 13, "NZ101", finding.message, end_line=4)
    assert finding.message.startswith("nan_to_num on training signal")


def test_end_line_is_the_statements_last_line():
    source = "import torch\nloss = torch.nan_to_num(\n    loss,\n    nan=0.0,\n)\n"
    [finding] = lint_source(source)
    assert (finding.line, finding.col, finding.end_line) == (2, 8, 5)


# ---- NZ001 ------------------------------------------------------------------------------
@pytest.mark.parametrize("shortcuts", [True, False])
@pytest.mark.parametrize(
    ("source", "line", "col", "words"),
    [
        ("def f(:\n    pass  # isnan\n", 1, 7, "invalid syntax"),
        ("x = 1\nif x\n    y = 2  # isnan\n", 2, 5, "expected ':'"),
        ("x = (1,  # isnan\n", 1, 5, "never closed"),
        ("def f():\nreturn 1  # isnan\n", 2, 1, "expected an indented block"),
    ],
)
def test_syntax_error_is_a_finding(source, line, col, words, shortcuts):
    [finding] = lint_source(source, "bad.py", shortcuts=shortcuts)
    assert (finding.path, finding.line, finding.col, finding.code) == ("bad.py", line, col, "NZ001")
    assert words in finding.message


def test_syntax_error_with_trigger_words_and_odd_input_never_raises():
    assert [f.code for f in lint_source("grads = jnp.nan_to_num(grads\n")] == ["NZ001"]
    assert [f.code for f in lint_source("x = isnan\0\n")] == ["NZ001"]
    assert [f.code for f in lint_source("isnan" + "(" * 300 + "\n")] == ["NZ001"]
    assert lint_source("") == []
    assert lint_source("\n\n# only a comment\n") == []


def test_syntax_error_can_be_deselected():
    assert lint_source("def f(:\n", select={"NZ101"}) == []


def test_symtable_only_errors_are_not_syntax_errors():
    # ``nonlocal`` at module level is rejected by the compiler, not by the parser: the
    # quick check (symtable) must not report what a full parse accepts.
    for shortcuts in (True, False):
        assert lint_source("nonlocal x\n", shortcuts=shortcuts) == []


# ---- noqa -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("comment", "suppressed"),
    [
        ("  # noqa", True),
        ("  # noqa: NZ101", True),
        ("  #noqa:NZ101", True),
        ("  # noqa: NZ201, NZ101", True),
        ("  # NOQA: nz101", True),
        ("  # noqa: NZ201", False),
        ("  # noqa: E501", False),
        ("  # a comment", False),
    ],
)
def test_noqa(comment, suppressed):
    findings = lint_source(BAD.format(comment))
    assert (findings == []) is suppressed


def test_noqa_on_the_first_or_last_line_of_the_statement():
    lines = ["import torch", "loss = torch.nan_to_num(", "    loss,", "    nan=0.0,", ")"]
    for index in (1, 4):
        marked = list(lines)
        marked[index] += "  # noqa: NZ101"
        assert lint_source("\n".join(marked) + "\n") == [], index
    middle = list(lines)
    middle[2] += "  # noqa: NZ101"
    assert [f.code for f in lint_source("\n".join(middle) + "\n")] == ["NZ101"]


def test_noqa_inside_a_string_does_not_count():
    source = "import numpy as np\ngrads = np.nan_to_num(grads, x='# noqa')\n"
    assert [f.code for f in lint_source(source)] == ["NZ101"]


def test_require_reason():
    reasoned = BAD.format("  # noqa: NZ101 padded rows carry no gradient")
    assert lint_source(reasoned, require_reason=True) == []
    bare = BAD.format("  # noqa: NZ101")
    findings = lint_source(bare, require_reason=True)
    assert [(f.line, f.code) for f in findings] == [(4, "NZ101"), (4, "NZ002")]
    noqa = next(f for f in findings if f.code == "NZ002")
    assert noqa.col == bare.splitlines()[3].index("#") + 1
    assert "reason" in noqa.message
    # without the option, a bare noqa suppresses as usual
    assert lint_source(bare) == []
    # deselecting NZ002 keeps the finding unsuppressed but quiet about the comment
    assert [f.code for f in lint_source(bare, require_reason=True, select={"NZ101"})] == ["NZ101"]


def test_require_reason_reports_reasonless_nozero_noqa_without_a_finding():
    source = "x = compute()  # noqa: NZ101\ny = 2  # noqa: E501\n"
    for shortcuts in (True, False):
        findings = lint_source(source, require_reason=True, shortcuts=shortcuts)
        assert [(f.line, f.code) for f in findings] == [(1, "NZ002")]


@pytest.mark.parametrize("shortcuts", [True, False])
@pytest.mark.parametrize(
    "path", ["tests/test_train.py", "pkg/train_test.py", "conftest.py", "test_x.py"]
)
def test_nothing_in_a_test_module_is_reported_but_its_bare_noqa(path: str, shortcuts: bool):
    """A test module exercises training code (a helper that zeroes NaN gradients for a
    parity check, a fixture building ``apply_if_finite``); it trains nothing itself."""
    source = BAD.format("") + "def broken(:\n"  # a finding and a syntax error
    assert lint_source(BAD.format(""), "train.py", shortcuts=shortcuts) != []
    assert lint_source(source, path, select=EVERY_CODE, shortcuts=shortcuts) == []
    bare = BAD.format("  # noqa: NZ101")
    findings = lint_source(bare, path, require_reason=True, shortcuts=shortcuts)
    assert [(f.line, f.code) for f in findings] == [(4, "NZ002")]


@pytest.mark.parametrize("path", ["testing.py", "tests/helpers.py", "contest.py", "test.py"])
def test_a_module_not_named_as_a_test_is_linted(path: str):
    assert [f.code for f in lint_source(BAD.format(""), path)] == ["NZ101"]


# ---- selection --------------------------------------------------------------------------
def test_select():
    source = (
        "import optax\nimport jax.numpy as jnp\ntx = optax.zero_nans()\n"
        "grads = jnp.nan_to_num(grads)\n"
    )
    assert [f.code for f in lint_source(source)] == ["NZ402", "NZ101"]
    assert [f.code for f in lint_source(source, select={"NZ101"})] == ["NZ101"]
    assert [f.code for f in lint_source(source, select=["NZ402"])] == ["NZ402"]
    assert lint_source(source, select=()) == []
    assert DEFAULT_CODES == EVERY_CODE - {"NZ203", "NZ406", "NZ407", "NZ408", "NZ501"}


def test_findings_are_sorted_and_unique():
    source = "import jax.numpy as jnp\nb = jnp.nan_to_num(b)\na = jnp.nan_to_num(loss); c = 1\n"
    findings = lint_source(source + "grad = jnp.nan_to_num(grad)\n")
    assert findings == sorted(set(findings))
    assert [f.line for f in findings] == [3, 4]


# ---- the pre-filters never change the findings ------------------------------------------
def test_libcst_sees_only_the_statement_holding_a_trigger():
    body = "\n".join(f"    x{i} = compute(x{i - 1})" for i in range(1, 200))
    source = (
        "import jax.numpy as jnp\n\nclass Trainer:\n    def big(self, grads):\n"
        + textwrap.indent(body, "    ")
        + "\n        grads = jnp.nan_to_num(grads)\n        return grads\n"
    )
    lines = split_lines(source)
    tree = ast.parse(source)
    units = prefilter.split_units(tree, lines)
    triggers = prefilter.TriggerLines(source)
    selected = [
        piece
        for unit in units
        if triggers.could_hold_finding(unit.first, unit.last)
        for piece in prefilter.narrow(unit, lines, frozenset({"nan_to_num"}), triggers)[0]
    ]
    assert [(p.first, p.last) for p in selected] == [(204, 204)]
    assert [f.line for f in lint_source(source)] == [204]


def test_a_file_without_triggers_is_not_parsed_for_rules():
    assert not prefilter.could_hold_finding("import numpy as np\nx = np.mean(a)\n")
    assert prefilter.could_hold_finding("y = g != g\n")
    assert not prefilter.could_hold_finding("y = g != gx\n")
    assert prefilter.could_hold_finding(
        "try:\n    f()\nexcept RuntimeError as e:\n    if 'nan' in str(e): pass\n"
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["'", '"', "NaN", "nan", "Inf", "inf", "inity", "non", "-", "finite"])
        | st.sampled_from(["x", " ", "_", "é", "\n"]),
        max_size=10,
    ).map("".join)
)
def test_the_string_screen_finds_what_the_string_pattern_finds(text):
    assert vocab.holds_nonfinite_text(text) == bool(vocab.NONFINITE_TEXT.search(text))


# Pieces of text around the flag words, to compose into texts below.
FLAG_PIECES = "overflow finite OverflowError except . = == ) ] , : \n x _ é self".split(" ")
FLAG_PIECES.append(" ")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FLAG_PIECES), max_size=12).map("".join))
def test_the_flag_screen_finds_what_the_flag_pattern_finds(text):
    assert vocab.binds_flag(text) == bool(vocab.FLAG_TEXT.search(text))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*sorted(vocab.TRIGGER_WORDS), "x", "_", " ", "."]), max_size=6))
def test_the_word_screen_finds_each_trigger_word_as_a_whole_word(pieces):
    text = "".join(pieces)
    expected = bool(vocab.word_offsets(text, vocab.TRIGGER_WORDS))
    assert vocab.TRIGGER_SCREEN.search(text) == expected


# Statements from every rule's examples, to compose into programs below.
SNIPPETS = sorted(
    {
        line
        for rule in ALL_RULES
        for example in rule.VALID + rule.INVALID
        for line in [example]
        if rule.code not in {"NZ001", "NZ002"}
    }
)


def _indent(source: str, depth: int) -> str:
    return textwrap.indent(source, "    " * depth)


@st.composite
def programs(draw: st.DrawFn) -> str:
    """Rule examples arranged at module level, in functions, methods and nested
    functions, joined with lines that share names with them."""
    parts = []
    for index in range(draw(st.integers(1, 5))):
        snippet = draw(st.sampled_from(SNIPPETS))
        where = draw(st.sampled_from(["module", "function", "method", "nested", "loop"]))
        if where == "module":
            parts.append(snippet)
        elif where == "function":
            parts.append(f"def f{index}(grads, loss, params):\n" + _indent(snippet, 1))
        elif where == "method":
            parts.append(
                f"class C{index}:\n    @staticmethod\n    def m(grads, loss):\n"
                + _indent(snippet, 2)
                + "    x = 1; y = 2\n"
            )
        elif where == "nested":
            parts.append(
                f"def outer{index}(loss):\n    ok = loss\n    def inner(grads):\n"
                + _indent(snippet, 2)
                + "    return inner\n"
            )
        else:
            parts.append("for batch in loader:\n    loss = step(batch)\n" + _indent(snippet, 1))
    return "\n".join(parts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_shortcuts_never_change_the_findings(program):
    fast = lint_source(program, "p.py", select=EVERY_CODE, require_reason=True)
    slow = lint_source(program, "p.py", select=EVERY_CODE, require_reason=True, shortcuts=False)
    assert fast == slow


def test_shortcuts_never_change_the_findings_on_real_sources():
    """optax's sources hold real uses of the switches, masks and finiteness tests."""
    root = Path(optax.__file__).parent
    files = sorted((root / "transforms").glob("*.py"))
    files += sorted((root / "_src").glob("[a-l]*.py"))
    assert len(files) > 30
    found = 0
    for path in files:
        source = path.read_text(encoding="utf-8")
        fast = lint_source(source, str(path), select=EVERY_CODE)
        assert fast == lint_source(source, str(path), select=EVERY_CODE, shortcuts=False), path
        found += len(fast)
    assert found > 0


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings_tabs_and_unicode(newline):
    source = (
        "import jax.numpy as jnp\n"
        "class Étape:\n"
        "\tdef pas(self, grads):\n"
        "\t\tnote = 'é — ü'; grads = jnp.nan_to_num(grads)\n"
        "\t\treturn grads\n"
    ).replace("\n", newline)
    for shortcuts in (True, False):
        [finding] = lint_source(source, "u.py", shortcuts=shortcuts)
        assert (finding.line, finding.col, finding.code) == (4, 27, "NZ101")  # characters


REAL_SOURCES = [
    path.read_text(encoding="utf-8")
    for path in sorted((Path(__file__).resolve().parents[2] / "src").rglob("*.py"))
] + [example for rule in ALL_RULES for example in rule.INVALID]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(REAL_SOURCES),
    st.floats(0, 1),
    st.floats(0, 1),
    st.sampled_from(["", "\n", "(", ")", ":", "    ", "\t", "'", '"""', "\\", "\x00", "é"]),
)
# A line holding only a backslash: libcst and ``ast`` place the next statement apart.
@example("import numpy as np\ng[np.isnan(g)] = 0\n", 0.0, 0.484375, "\\")
def test_damaged_sources_never_raise(source, start, stop, insert):
    """Cut, spliced and broken real code: a finding list, never an exception, and the
    same findings with or without the pre-filters."""
    a, b = sorted((int(start * len(source)), int(stop * len(source))))
    damaged = source[:a] + insert + source[b:]
    fast = lint_source(damaged, "d.py", select=EVERY_CODE, require_reason=True)
    assert all(isinstance(f, Finding) for f in fast)
    assert fast == lint_source(
        damaged, "d.py", select=EVERY_CODE, require_reason=True, shortcuts=False
    )
