"""Importing a part of nozero without its extra names the extra to install. Each case runs
in a fresh interpreter with the dependency blocked (``sys.modules[name] = None``, which
makes Python treat it as not installed), not by uninstalling it."""

from __future__ import annotations

import subprocess
import sys

import pytest

# (module imported, the part its message names, the dependency blocked, the extra)
CASES = [
    ("nozero.testing", "nozero.testing", "numpy", "pytest"),
    ("nozero.testing", "nozero.testing", "hypothesis", "pytest"),
    ("nozero.strategies", "nozero.strategies", "numpy", "pytest"),
    ("nozero.jax", "nozero.jax", "jax", "train"),
    ("nozero.jax", "nozero.jax", "optax", "train"),
    ("nozero_trainer.loop", "nozero_trainer", "jax", "train"),
]

PROBE = """
import sys
sys.modules[{blocked!r}] = None
try:
    import {module}
except ModuleNotFoundError as err:
    print(type(err).__name__, err.name, sep="|")
    print(err)
else:
    print("imported")
"""


@pytest.mark.parametrize(("module", "part", "blocked", "extra"), CASES, ids=str)
def test_a_missing_extra_is_named(module, part, blocked, extra):
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module, blocked=blocked)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"ModuleNotFoundError|{blocked}",
        f"{part} needs {blocked}: pip install 'nozero[{extra}]'",
    ]


def test_nothing_is_blocked_on_the_full_install():
    code = "import nozero.testing, nozero.strategies, nozero.jax, nozero_trainer.loop"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
