"""The README's "Guard your own trainer" examples, run as written: each block is a whole
conftest.py, and each passes every check (compiling at most once per check)."""

from __future__ import annotations

import re
from pathlib import Path

# Imported once here so the in-process pytest runs below reuse them instead of reloading.
import equinox  # noqa: F401
import flax  # noqa: F401
import jax  # noqa: F401
import optax  # noqa: F401
import pytest

pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parents[2] / "README.md"
FAST = ("--nozero", "--nozero-steps=3", "--nozero-examples=10", "-p", "no:cacheprovider")
# torch's example runs in its own process, with a hard time limit; tests/conftest.py keeps
# torch loaded once in this one (its C extension cannot be loaded twice).
TORCH_RUN_LIMIT = 120


def readme_examples() -> dict[str, str]:
    """The conftest.py blocks of the README's own-trainer section, by library."""
    text = README.read_text()
    section = text.split("<!-- section: own-trainer -->")[1].split("<!-- end section")[0]
    blocks = re.findall(r"```python\n(# conftest\.py.*?)```", section, flags=re.S)
    examples = {}
    for block in blocks:
        library = ("flax", "error_if", "equinox", "MultiSteps", "torch")
        name = next(word for word in library if word in block.splitlines()[0])
        examples[name] = block
    return examples


def test_the_readme_has_the_five_examples_each_with_at_most_ten_lines_of_glue():
    examples = readme_examples()
    assert sorted(examples) == ["MultiSteps", "equinox", "error_if", "flax", "torch"]
    for name, block in examples.items():
        glue = block.split("# The glue")[1].strip().splitlines()[1:]
        assert len(glue) <= 10, f"{name}: {len(glue)} lines of glue"


def _run_example(pytester: pytest.Pytester, block: str, *, subprocess: bool = False) -> None:
    pytester.makeconftest(block)
    args = (*FAST, "-v", "-W", "error::RuntimeWarning")
    if subprocess:
        result = pytester.runpytest_subprocess(*args, timeout=TORCH_RUN_LIMIT)
    else:
        result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["nozero::never_continue[[]nozero_trainer[]] PASSED*"])


@pytest.mark.parametrize("library", ["flax", "equinox", "error_if", "MultiSteps"])
def test_jax_examples_pass_every_check(pytester, library):
    # Each passes with compile_count=count_traces(...): one compilation per check at most.
    _run_example(pytester, readme_examples()[library])


def test_torch_example_passes_every_check(pytester):
    pytest.importorskip("torch", reason="torch is not installed")
    _run_example(pytester, readme_examples()["torch"], subprocess=True)
