"""nozero.jax stays apart: the base package and the linter never import it (nor JAX), and
it needs nothing beyond jax, optax and numpy."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
{imports}
tops = {{name.split(".")[0] for name in sys.modules}}
ours = {{name for name in sys.modules if name.startswith("nozero")}}
print(json.dumps(sorted(tops | ours)))
"""


def _modules_after(imports: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(imports=imports)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_the_base_package_and_the_linter_never_import_jax():
    loaded = _modules_after("import nozero, nozero.cli, nozero.lint.engine")
    assert "nozero.jax" not in loaded and "jax" not in loaded and "optax" not in loaded


def test_nozero_jax_needs_only_jax_optax_and_numpy():
    loaded = _modules_after("import nozero.jax")
    assert {"jax", "optax", "numpy"} <= loaded
    assert not loaded & {
        "pytest",
        "hypothesis",
        "pyarrow",
        "libcst",
        "nozero_trainer",
        "equinox",
        "nozero.plugin",
        "nozero.lint",
    }
