"""The nozero.jax example of the guard's docs page runs as printed and halts where it says."""

from __future__ import annotations

import subprocess
import sys

from docs_blocks import python_blocks


def _example() -> str:
    """The page's first block: the whole example (later blocks are fragments)."""
    return python_blocks("guards/jax.md")[0]


def test_the_docs_example_confirms_then_halts_at_the_poisoned_step(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(_example(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "confirmed 100"
    assert lines[1].startswith("non-finite loss/grad at step 123: loss=nan grad_norm=nan")
    assert lines[2:] == ["poisoned batch: True"]
