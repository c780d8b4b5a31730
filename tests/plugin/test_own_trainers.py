"""The plugin's recipe pages (docs/plugin/recipes/), run as written: each block is a whole
conftest.py, and each passes every check (compiling at most once per check)."""

from __future__ import annotations

# Imported once here so the in-process pytest runs below reuse them instead of reloading.
import equinox  # noqa: F401
import flax  # noqa: F401
import jax  # noqa: F401
import optax  # noqa: F401
import pytest
from docs_blocks import python_blocks

pytest_plugins = ["pytester"]

FAST = ("--nozero", "--nozero-steps=3", "--nozero-examples=10", "-p", "no:cacheprovider")
# Every python block of these pages is a conftest.py that this module runs (tests/test_docs.py).
RUNS_DOCS_BLOCKS = {
    "plugin/recipes/flax-linen.md": 1,
    "plugin/recipes/equinox.md": 2,
    "plugin/recipes/multisteps.md": 1,
    "plugin/recipes/torch.md": 1,
}


def readme_examples() -> dict[str, str]:
    """The conftest.py blocks of the recipe pages, by library."""
    blocks = []
    for page, count in RUNS_DOCS_BLOCKS.items():
        page_blocks = python_blocks(page, first_line_prefix="# conftest.py")
        assert len(page_blocks) == count == len(python_blocks(page)), page
        blocks += page_blocks
    examples = {}
    for block in blocks:
        library = ("flax", "error_if", "equinox", "MultiSteps", "torch")
        name = next(word for word in library if word in block.splitlines()[0])
        examples[name] = block
    return examples


def test_the_recipes_have_the_five_examples_each_with_at_most_ten_lines_of_glue():
    examples = readme_examples()
    assert sorted(examples) == ["MultiSteps", "equinox", "error_if", "flax", "torch"]
    for name, block in examples.items():
        glue = block.split("# The glue")[1].strip().splitlines()[1:]
        assert len(glue) <= 10, f"{name}: {len(glue)} lines of glue"


def _run_example(pytester: pytest.Pytester, block: str) -> None:
    pytester.makeconftest(block)
    result = pytester.runpytest_inprocess(*FAST, "-v", "-W", "error::RuntimeWarning")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["nozero::never_continue[[]nozero_trainer[]] PASSED*"])


@pytest.mark.parametrize("library", ["flax", "equinox", "error_if", "MultiSteps"])
def test_jax_examples_pass_every_check(pytester, library):
    # Each passes with compile_count=count_traces(...): one compilation per check at most.
    _run_example(pytester, readme_examples()[library])


def test_torch_example_passes_every_check(pytester):
    pytest.importorskip("torch", reason="torch is not in the test extra (CUDA wheels, 2.7 GB)")
    _run_example(pytester, readme_examples()["torch"])
