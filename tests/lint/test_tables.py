"""The tables of sources, propagation steps and reactions: one place per entry, each with
the real-code shape it stands for, importing nothing of the linter, and the very objects
the vocabulary and the flow pass read."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from nozero.lint import tables, vocab
from nozero.lint.facts import sources as flow_sources
from nozero.lint.tables import propagation, reactions, sources, switches

TABLE_FILES = sorted(Path(tables.__file__).parent.glob("*.py"))


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.name)
def test_every_entry_on_its_own_line_has_a_comment(path):
    text = path.read_text()
    lines = text.splitlines()
    missing = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Set | ast.Dict | ast.Tuple) and node.lineno != node.end_lineno:
            for element in node.keys if isinstance(node, ast.Dict) else node.elts:
                if isinstance(element, ast.Constant) and "#" not in lines[element.lineno - 1]:
                    missing.append(element.lineno)
    assert not missing, f"{path.name}: entries without a comment on lines {missing}"


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.name)
def test_each_table_module_says_how_to_add_a_shape(path):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert path.name == "__init__.py" or "test_corpus.py" in doc


def test_tables_import_nothing_of_the_linter():
    code = (
        "import sys; import nozero.lint.tables.sources, nozero.lint.tables.propagation, "
        "nozero.lint.tables.reactions, nozero.lint.tables.switches; "
        "print(sorted(m for m in sys.modules if m.startswith('nozero.lint.') "
        "and not m.startswith('nozero.lint.tables')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_old_names_are_the_tables_own_objects():
    assert vocab.PREDICATES is sources.PREDICATES
    assert vocab.OVERFLOW_HELPERS is sources.OVERFLOW_HELPERS
    assert vocab.SANITIZERS is reactions.SANITIZERS
    assert vocab.MAPPERS is propagation.MAPPERS
    assert vocab.OPTAX_SWITCHES is switches.OPTAX_SWITCHES
    assert flow_sources.PREDICATE_POLARITY is sources.PREDICATE_POLARITY
    assert flow_sources.FLAG_REDUCTIONS is propagation.FLAG_REDUCTIONS
    assert flow_sources.ZEROING_CALLS is reactions.ZEROING_CALLS


def test_predicates_have_a_polarity_and_wider_tables_hold_their_parts():
    assert set(sources.PREDICATE_POLARITY) == sources.PREDICATES
    assert sources.INFINITY_TESTS <= sources.PREDICATES
    assert reactions.GRADIENT_CLEARING <= reactions.ZEROING_CALLS
    assert reactions.CLAMP_CALLS <= reactions.CLAMPS
    assert propagation.SELECTORS <= propagation.SELECT_CALLS
    assert reactions.CHECK_CALLS <= reactions.RAISING_CALLS


def test_every_table_module_is_listed_in_the_package_docstring():
    names = [m.name for m in pkgutil.iter_modules(tables.__path__)]
    assert names and all(f"``{name}``" in (tables.__doc__ or "") for name in names)
