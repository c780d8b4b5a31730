"""The torch recipe pages run as written: each conftest.py block passes all four checks of
``pytest --nozero``; copies of the loop and the Lightning trainer without their guard are
caught."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from recipe_runs import (  # noqa: E402
    assert_recipe_passes,
    assert_recipe_passes_and_broken_copy_fails,
    broken,
    conftest_block,
    run_recipe,
)

pytest_plugins = ["pytester"]

# Every python block of these pages is a conftest.py that this module runs (tests/test_docs.py).
RUNS_DOCS_BLOCKS = {
    "plugin/recipes/torch.md": 1,
    "plugin/recipes/lightning.md": 1,
    "plugin/recipes/huggingface.md": 1,
}
LIMIT = 150  # seconds per pytest process
UNGUARDED = ("callbacks=[NonFiniteGuard(sync_every=16)],", "callbacks=[],")


@pytest.mark.parametrize("page", sorted(RUNS_DOCS_BLOCKS))
def test_each_recipe_registers_in_at_most_five_lines_of_glue(page):
    glue = conftest_block(page).split("# The glue")[1].strip().splitlines()[1:]
    assert 1 <= len(glue) <= 5, glue


def test_torch_loop_recipe_passes_and_zeroing_nan_grads_is_caught(pytester):
    block = conftest_block("plugin/recipes/torch.md")
    zeroing = (
        "for p in model.parameters():\n"
        "    p.grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)\n"
        "optimizer.step()"
    )
    copy = broken(block, "guard.step(loss, batch=batch, grad_norm=grad_norm)", zeroing)
    result = run_recipe(pytester, block, copy, examples=5, limit=LIMIT)
    assert_recipe_passes_and_broken_copy_fails(result)


def test_lightning_recipe_passes_and_fit_without_the_callback_is_caught(pytester):
    pytest.importorskip("pytorch_lightning")
    block = conftest_block("plugin/recipes/lightning.md")
    result = run_recipe(pytester, block, broken(block, *UNGUARDED), examples=3, limit=LIMIT)
    assert_recipe_passes_and_broken_copy_fails(result)


def test_huggingface_recipe_passes_every_check(pytester):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    block = conftest_block("plugin/recipes/huggingface.md")
    # One to two seconds per Trainer run here, about 25 runs for the four checks: no
    # broken copy beside it (the loop's and Lightning's show that one is caught).
    result = run_recipe(pytester, block, None, examples=2, limit=LIMIT)
    assert_recipe_passes(result)
