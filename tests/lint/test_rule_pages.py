"""The rule pages as a reader meets them (``nozero rule``, ``docs/rules/``): the example
code on each page compiles and does what the page says, and "What it flags" reads in
short sentences."""

from __future__ import annotations

import re

import pytest

from nozero.lint.catalog import ENTRIES, RuleEntry
from nozero.lint.check import check_source

MAX_WORDS = 35
RULES = [pytest.param(entry, id=entry.code) for entry in ENTRIES]


def section(doc: str, title: str) -> str:
    match = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", doc, re.S | re.M)
    assert match is not None, title
    return match.group(1)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def sentences(text: str) -> list[str]:
    """Sentences of prose: code blocks left out, each list item and paragraph apart."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    for part in re.split(r"\n\s*\n|\n(?=- )|:\n", prose):
        joined = " ".join(part.split())
        found += [s for s in re.split(r"(?<=[.!?;])\s+(?=[A-Z`(-])", joined) if s]
    return found


def codes(source: str, entry: RuleEntry) -> set[str]:
    findings = check_source(source, "example.py", select={entry.code}, require_reason=True)
    return {f.code for f in findings}


@pytest.mark.parametrize("entry", RULES)
def test_the_example_compiles_and_is_flagged_with_the_rule_code(entry: RuleEntry):
    [example] = python_blocks(section(entry.doc, "Example"))
    if entry.code == "NZ001":  # the syntax error is the point
        with pytest.raises(SyntaxError):
            compile(example, "example.py", "exec")
    else:
        compile(example, "example.py", "exec")
    assert entry.code in codes(example, entry)


@pytest.mark.parametrize("entry", RULES)
def test_the_code_to_use_instead_compiles_and_is_not_flagged(entry: RuleEntry):
    for block in python_blocks(section(entry.doc, "Use instead")):
        compile(block, "example.py", "exec")
        assert entry.code not in codes(block, entry), block


def test_pages_that_show_code_to_use_instead():
    """The pages whose fix is code show it (the others say it in a sentence)."""
    showing = {e.code for e in ENTRIES if python_blocks(section(e.doc, "Use instead"))}
    expected = {"NZ002", "NZ003", "NZ101", "NZ201", "NZ202", "NZ301", "NZ302", "NZ401"}
    expected |= {"NZ402", "NZ403", "NZ404", "NZ405", "NZ407", "NZ501"}
    assert expected <= showing


@pytest.mark.parametrize("entry", RULES)
def test_what_it_flags_reads_in_short_sentences(entry: RuleEntry):
    long = [s for s in sentences(section(entry.doc, "What it flags")) if len(s.split()) > MAX_WORDS]
    assert long == [], long


def test_the_sentence_splitter_measures_what_a_reader_reads():
    text = "One two three. Four five: `a.b()` six.\n\n- item one;\n- item two.\n"
    assert sentences(text) == [
        "One two three.",
        "Four five: `a.b()` six.",
        "- item one;",
        "- item two.",
    ]


def test_nz201_uses_the_real_check_finite_signature():
    import inspect

    from nozero import check_finite

    assert list(inspect.signature(check_finite).parameters) == ["step", "loss", "grad_norm"]
    [block] = python_blocks(section(dict((e.code, e) for e in ENTRIES)["NZ201"].doc, "Use instead"))
    assert "from nozero import check_finite" in block
    assert "check_finite(step, loss, grad_norm)" in block


def test_noqa_reasons_in_examples_fit_their_codes():
    """NZ002's message and page do not offer one stock reason for every code."""
    nz002 = dict((e.code, e) for e in ENTRIES)["NZ002"]
    assert "fp16" not in nz002.message and "fp16" not in nz002.doc
