"""torch is an optional extra: importing nozero never pulls it (or its frameworks) in."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "numpy", "pytorch_lightning", "lightning", "transformers", "accelerate")

PROBE = """
import sys
import {modules}
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(",".join(loaded))
"""


def _loaded(*modules: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=", ".join(modules), heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [m for m in done.stdout.strip().split(",") if m]


def test_importing_nozero_and_its_plugin_imports_no_torch():
    assert _loaded("nozero", "nozero.contract", "nozero.plugin.plugin") == []


def test_the_torch_guard_imports_torch_but_no_framework():
    pytest.importorskip("torch")
    loaded = {m.split(".")[0] for m in _loaded("nozero.torch")}
    assert "torch" in loaded  # the probe sees what it looks for
    assert not loaded & {"pytorch_lightning", "lightning", "transformers", "accelerate"}
