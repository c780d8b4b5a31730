"""Generated and mutated sources never crash the linter, and the shortcuts never change
what it finds.

Two sources of odd code: hypothesmith's programs from Python's grammar (seasoned with
trigger text, or they would almost never reach the rules), and the rules' own examples
and typical training code with lines and tokens deleted, repeated, swapped, re-indented
or cut short. Each is linted with every rule on, three ways: the engine with its
shortcuts, the engine without them, and the runner's path (which skips the engine for
text without triggers). The three must agree exactly.
"""

from __future__ import annotations

import io
import tokenize

import hypothesmith
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nozero.lint.catalog import ALL_CODES
from nozero.lint.check import UNUSED_NOQA, check_source
from nozero.lint.engine import lint_source
from nozero.lint.rules import ALL_RULES
from nozero.lint.runner import Job, lint_one

from .conftest import BAD_SOURCE, GOOD_SOURCE

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,  # a fixed budget per run, not a growing replay of old examples
)

# Statements in the shapes the rules look for, to splice into generated code.
TRIGGER_LINES = (
    "grads = jnp.nan_to_num(grads)",
    "if torch.isnan(loss): continue",
    "if not math.isfinite(loss): return params",
    "params = jnp.where(jnp.isfinite(loss), new_params, params)",
    "opt = optax.apply_if_finite(opt, 5)",
    "ok = bool(jnp.isfinite(grads).all())",
    "if g != g: g = 0.0",
    "loss = torch.nan_to_num(loss, nan=0.0)  # noqa: NZ1",
    "except FloatingPointError: pass",
    "x = nan_to_num",
)
REAL_SNIPPETS = [
    BAD_SOURCE,
    GOOD_SOURCE,
    "import torch\n\n\nclass Trainer:\n    def step(self, batch):\n"
    "        loss = self.model(batch)\n        if torch.isnan(loss):\n"
    "            self.optimizer.zero_grad()\n            return None\n"
    "        loss.backward()\n        self.optimizer.step()\n        return loss\n",
    "import jax\nimport jax.numpy as jnp\n\n\ndef update(params, grads, lr):\n"
    "    finite = jnp.all(jnp.array([jnp.isfinite(g).all() for g in jax.tree.leaves(grads)]))\n"
    "    new = jax.tree.map(lambda p, g: p - lr * g, params, grads)\n"
    "    return jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, params)\n",
]
EXAMPLES = [
    example
    for rule in ALL_RULES
    for example in (*rule.VALID, *rule.INVALID)
    if isinstance(example, str)
] + REAL_SNIPPETS
JOB = Job(frozenset(ALL_CODES), require_reason=True)
# Built once: building the strategy compiles Python's grammar (seconds).
PROGRAMS = hypothesmith.from_grammar()


def assert_never_crashes_and_shortcuts_agree(source: str) -> None:
    fast = lint_source(source, "fuzz.py", select=ALL_CODES, require_reason=True)
    slow = lint_source(source, "fuzz.py", select=ALL_CODES, require_reason=True, shortcuts=False)
    assert fast == slow, source
    status, rows = lint_one("fuzz.py", source.encode("utf-8", "surrogatepass"), JOB)
    if status == "ok":  # the runner checks through ``check_source``: NZ003 comes on top
        checked = check_source(source, "fuzz.py", select=ALL_CODES, require_reason=True)
        assert rows == [[f.line, f.col, f.code, f.message, f.end_line] for f in checked], source
        assert [f for f in checked if f.code != UNUSED_NOQA] == fast, source
    else:  # only text that is not valid UTF-8 may be turned away, and never as a crash
        assert status == "undecodable", (source, rows)


@st.composite
def seasoned_programs(draw: st.DrawFn) -> str:
    """A grammar-generated program with a trigger statement spliced in at the
    indentation of one of its lines (often breaking it: NZ001 must agree too)."""
    program = draw(PROGRAMS)
    lines = program.splitlines(keepends=True) or [""]
    at = draw(st.integers(0, len(lines)))
    reference = lines[min(at, len(lines) - 1)]
    indent = reference[: len(reference) - len(reference.lstrip(" \t"))]
    lines.insert(at, indent + draw(st.sampled_from(TRIGGER_LINES)) + "\n")
    return "".join(lines)


# hypothesmith compiles what it generates; odd but valid programs warn as they compile
@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@FUZZ
@given(seasoned_programs())
def test_grammar_generated_programs(source: str) -> None:
    assert_never_crashes_and_shortcuts_agree(source)


def _tokens(source: str) -> list[str]:
    try:
        return [
            t.string
            for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.string.strip()
        ]
    except (tokenize.TokenError, SyntaxError):
        return source.split()


@st.composite
def mutated_examples(draw: st.DrawFn) -> str:
    """A rule example or real snippet after one to three random edits."""
    source = draw(st.sampled_from(EXAMPLES))
    for _ in range(draw(st.integers(1, 3))):
        lines = source.splitlines(keepends=True) or ["\n"]
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, len(lines) - 1))
        edit = draw(
            st.sampled_from(
                ["delete", "repeat", "swap", "indent", "dedent", "token", "cut", "char"]
            )
        )
        if edit == "delete":
            del lines[i]
        elif edit == "repeat":
            lines.insert(j, lines[i])
        elif edit == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif edit == "indent":
            lines[i] = "    " + lines[i]
        elif edit == "dedent":
            lines[i] = lines[i][4:] if lines[i].startswith("    ") else lines[i].lstrip()
        elif edit == "token":
            tokens = _tokens(source) or ["x"]
            old, new = draw(st.sampled_from(tokens)), draw(st.sampled_from(tokens))
            lines[i] = lines[i].replace(old, new, 1)
        elif edit == "cut":
            lines = lines[: i + 1]
            lines[-1] = lines[-1][: draw(st.integers(0, len(lines[-1])))]
        else:
            column = draw(st.integers(0, len(lines[i])))
            char = draw(st.sampled_from(list("():,[]{}=.\n\t #'\"\\!*") + ["\r\n", "\0"]))
            lines[i] = lines[i][:column] + char + lines[i][column:]
        source = "".join(lines)
    return source


@FUZZ
@given(mutated_examples())
def test_mutated_examples_and_snippets(source: str) -> None:
    assert_never_crashes_and_shortcuts_agree(source)


@pytest.mark.parametrize(
    ("source", "position"),
    [
        (
            "def f(loss, grads):\n  x = 1\n\x0c  grads = jnp.nan_to_num(grads)\n  return grads\n",
            (3, 12),
        ),
        ("import torch\n\x0closs = torch.nan_to_num(loss)\n", (2, 9)),
        (
            "class A:\n  x = 1\n\x0c  def f(self, grad):\n"
            "    y = 1\n\x0c    return jnp.nan_to_num(grad)\n",
            (5, 13),
        ),
    ],
)
def test_a_form_feed_in_indentation_gives_the_same_column_with_and_without_shortcuts(
    source, position
):
    """Found by the fuzzing above: libcst drops some form feeds from indentation when it
    generates code, depending on the lines around them; columns are the file's own."""
    fast = lint_source(source, select=ALL_CODES)
    assert [(f.line, f.col) for f in fast] == [position]
    assert fast == lint_source(source, select=ALL_CODES, shortcuts=False)


def test_the_fuzzed_examples_reach_the_rules():
    """The corpus the mutations start from holds findings of most rules, so the fuzzing
    exercises the engine, not just the pre-filter's 'nothing here'."""
    found = {
        f.code
        for example in EXAMPLES
        for f in lint_source(example, select=ALL_CODES, require_reason=True)
    }
    assert len(found) >= len(ALL_CODES) // 2, found
