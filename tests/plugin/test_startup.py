"""Without --nozero the plugin costs nothing: no heavy imports, no measurable start-up time.

Real subprocesses: every pytest run in an environment with nozero installed pays this.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("numpy", "hypothesis", "jax", "torch", "nozero.plugin.collection", "nozero.testing")
CHEAP = {
    "nozero",
    "nozero.contract",
    "nozero.plugin",
    "nozero.plugin.plugin",
    "nozero.plugin.options",
}
DUMP_MODULES = """
import sys

def test_dump_modules():
    with open("modules.txt", "w") as out:
        out.write("\\n".join(sorted(sys.modules)))
"""


def _pytest(directory: Path, *args: str, env: dict[str, str] | None = None) -> float:
    """Run pytest in ``directory``; return the wall time in seconds."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stdout + done.stderr
    return elapsed


def _modules(directory: Path, *args: str) -> set[str]:
    _pytest(directory, *args)
    return set((directory / "modules.txt").read_text().split())


def test_plugin_imports_nothing_heavy_without_nozero(tmp_path):
    (tmp_path / "test_modules.py").write_text(DUMP_MODULES)
    with_plugin = _modules(tmp_path)
    without_plugin = _modules(tmp_path, "-p", "no:nozero")
    assert "nozero.plugin.plugin" in with_plugin
    assert "nozero.plugin.plugin" not in without_plugin
    # Only what nozero added counts: another installed plugin may import numpy itself.
    added = with_plugin - without_plugin
    heavy = {name for name in added if name.split(".")[0] in HEAVY or name in HEAVY}
    assert not heavy, f"imported without --nozero: {sorted(heavy)}"
    assert added <= CHEAP, sorted(added - CHEAP)


# The plugin is timed on bare pytest: the other plugins installed beside it (jax's,
# hypothesis's) make pytest's own start-up vary by hundreds of milliseconds from run to
# run, which would drown the tens this test is about.
BARE = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
WITH_PLUGIN = ("-p", "nozero.plugin.plugin")  # what the ``pytest11`` entry point loads


def _paired_overhead(directory: Path, pairs: int) -> float:
    """Median of (with plugin - without), each pair run back to back in alternating order,
    so slow drifts in machine load cancel out."""
    differences = []
    for i in range(pairs):
        if i % 2:
            without = _pytest(directory, env=BARE)
            with_plugin = _pytest(directory, *WITH_PLUGIN, env=BARE)
        else:
            with_plugin = _pytest(directory, *WITH_PLUGIN, env=BARE)
            without = _pytest(directory, env=BARE)
        differences.append(with_plugin - without)
    return statistics.median(differences)


def test_startup_stays_within_50ms_of_running_without_the_plugin(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    # A shared machine has load spikes: a real overhead shows in every round, noise does not.
    rounds = []
    for _ in range(3):
        rounds.append(_paired_overhead(tmp_path, pairs=7))
        if rounds[-1] < 0.050:
            break
    shown = ", ".join(f"{overhead * 1000:.0f} ms" for overhead in rounds)
    assert min(rounds) < 0.050, f"median start-up overhead per round: {shown}"
