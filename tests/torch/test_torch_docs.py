"""The plain-loop example of docs/guards/torch.md runs as printed and says what it claims."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guards" / "torch.md"

# Until tests/docs_blocks.py (python_blocks) is on this branch: the page's ```python blocks.
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def test_the_plain_loop_example_halts_at_step_123(capsys):
    blocks = _BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    example = blocks[0]
    assert "Guard(optimizer, sync_every=16, model=model, max_grad_norm=1.0)" in example
    namespace: dict = {}
    exec(compile(example, str(PAGE), "exec"), namespace)  # noqa: S102
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("non-finite loss/grad at step 123: loss=nan grad_norm=nan")
    after = eval(printed[1])  # noqa: S307 - the dict the page prints
    assert after["optimizer_steps"] == 5 and after["batches"] == 4
    assert namespace["guard"].steps == 128
