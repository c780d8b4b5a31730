"""The plain-loop example of docs/guards/torch.md runs as printed and says what it claims."""

from __future__ import annotations

import pytest
from docs_blocks import page_path, python_blocks

torch = pytest.importorskip("torch")

PAGE = page_path("guards/torch.md")


def test_the_plain_loop_example_halts_at_step_123(capsys):
    blocks = python_blocks(PAGE)
    example = blocks[0]
    assert "Guard(optimizer, sync_every=16, model=model, max_grad_norm=1.0)" in example
    namespace: dict = {}
    exec(compile(example, str(PAGE), "exec"), namespace)  # noqa: S102
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("non-finite loss/grad at step 123: loss=nan grad_norm=nan")
    after = eval(printed[1])  # noqa: S307 - the dict the page prints
    assert after["optimizer_steps"] == 5 and after["batches"] == 4
    assert namespace["guard"].steps == 128
