"""Every rule's own VALID/INVALID examples, with and without the pre-filters, and the
registry's contract (codes, names, documentation) that the command line relies on."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from nozero.lint.check import check_source
from nozero.lint.rules import ALL_RULES, get_rule
from nozero.lint.rules.base import Example

EXAMPLES = [
    pytest.param(rule, kind, index, id=f"{rule.code}-{kind}-{index}")
    for rule in ALL_RULES
    for kind in ("VALID", "INVALID")
    for index in range(len(getattr(rule, kind)))
]


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize(("rule", "kind", "index"), EXAMPLES)
def test_rule_examples(rule, kind, index, shortcuts):
    source = getattr(rule, kind)[index]
    findings = check_source(
        source, "example.py", select={rule.code}, require_reason=True, shortcuts=shortcuts
    )
    codes = [f.code for f in findings]
    if kind == "INVALID":
        assert codes and set(codes) == {rule.code}, (source, findings)
        assert [f.line for f in findings] == [source.line], (source, findings)
    else:
        assert rule.code not in codes, (source, findings)


def test_every_rule_has_examples_of_both_kinds():
    for rule in ALL_RULES:
        assert rule.VALID and rule.INVALID, rule.code


def test_every_example_is_dedented_code_and_every_invalid_one_names_its_line():
    for rule in ALL_RULES:
        assert all(isinstance(example, Example) for example in rule.VALID + rule.INVALID)
        assert all(isinstance(example.line, int) for example in rule.INVALID), rule.code


def test_invalid_examples_are_found_by_the_default_selection_too():
    """The examples are not artefacts of selecting one code: with the default rules each
    INVALID example of a default rule still reports that rule."""
    for rule in ALL_RULES:
        if not rule.default_enabled or rule.code == "NZ002":
            continue
        for source in rule.INVALID:
            assert rule.code in {f.code for f in check_source(source)}, (rule.code, source)


def test_codes_are_unique_sorted_and_well_formed():
    codes = [rule.code for rule in ALL_RULES]
    assert codes == sorted(set(codes))
    assert all(re.fullmatch(r"NZ\d{3}", code) for code in codes)
    families = {code[2] for code in codes}
    assert families == {"0", "1", "2", "3", "4", "5"}


def test_names_messages_and_docs():
    names = [rule.name for rule in ALL_RULES]
    assert len(names) == len(set(names))
    for rule in ALL_RULES:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule.name), rule.name
        assert rule.message and "\n" not in rule.message
        for section in ("## What it flags", "## Why it is harmful", "## Example", "## Use instead"):
            assert section in rule.doc, (rule.code, section)
        assert "```python" in rule.doc, rule.code


def test_get_rule():
    assert get_rule("NZ101").name == "nan-to-num-on-signal"
    with pytest.raises(KeyError):
        get_rule("NZ999")
    with pytest.raises(KeyError):
        get_rule("nz101")


def test_informational_rule_is_off_by_default():
    assert not get_rule("NZ501").default_enabled
    source = get_rule("NZ501").INVALID[0]
    assert "NZ501" not in {f.code for f in check_source(source)}
    assert {f.code for f in check_source(source, select={"NZ501"})} == {"NZ501"}
    off = [rule.code for rule in ALL_RULES if not rule.default_enabled]
    assert off == ["NZ203", "NZ406", "NZ407", "NZ408", "NZ501"]


def test_rule_pages_are_current():
    """``docs/rules/`` is what the registry renders (regenerate with
    ``python -m nozero.lint.rules.pages docs/rules``)."""
    from pathlib import Path

    from nozero.lint.rules.pages import pages

    directory = Path(__file__).resolve().parents[2] / "docs" / "rules"
    expected = pages()
    assert sorted(p.name for p in directory.glob("*.md")) == sorted(expected)
    # The site's rules section opens on index.md, which links every rule's page.
    assert all(f"]({rule.code}.md)" in expected["index.md"] for rule in ALL_RULES)
    for name, text in expected.items():
        assert (directory / name).read_text(encoding="utf-8") == text, name


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.code)
def test_the_documented_example_is_flagged(rule):
    example = re.search(r"## Example\n```python\n(.*?)```", rule.doc, re.S)
    assert example is not None
    findings = check_source(example.group(1), select={rule.code}, require_reason=True)
    assert rule.code in {f.code for f in findings}


def test_catalog_and_prefilter_import_without_libcst():
    """Listing rules and screening files must not pay for libcst's import."""
    code = (
        "import sys\n"
        "from nozero.lint import catalog, prefilter\n"
        "assert catalog.entry('NZ101').name == 'nan-to-num-on-signal'\n"
        "assert prefilter.could_hold_finding('g = jnp.nan_to_num(g)')\n"
        "print('libcst' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False", done.stderr


def test_every_rule_class_takes_its_metadata_from_the_catalog():
    from nozero.lint import catalog

    for rule in ALL_RULES:
        entry = catalog.entry(rule.code)
        assert (rule.name, rule.message, rule.doc, rule.default_enabled) == (
            entry.name,
            entry.message,
            entry.doc,
            entry.default,
        )
    assert {rule.code for rule in ALL_RULES} == set(catalog.CATALOG)
