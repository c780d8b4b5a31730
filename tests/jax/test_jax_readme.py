"""The README's nozero.jax example runs as printed and halts where it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("<!-- section: jax-guard -->")[1].split("<!-- end section: jax-guard -->")[
        0
    ]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_confirms_then_halts_at_the_poisoned_step(tmp_path):
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
