"""``nozero-train`` on the base install (no ``[train]``, no ``[plot]``), in a real venv.

The venv is built once per test session with ``python -m venv`` and ``pip install -e .``.
If pip cannot build it, the test fails: an install that cannot be checked is not a pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(command, timeout, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("base-install") / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    assert made.returncode == 0, made.stderr
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(REPO)]
    installed = _run(pip, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    missing = _run([str(venv / "bin" / "python"), "-c", "import jax"], timeout=60)
    assert missing.returncode != 0, "the base install must not bring jax"
    return venv


def _nozero_train(venv, *args, cwd):
    return _run([str(venv / "bin" / "nozero-train"), *map(str, args)], timeout=60, cwd=cwd)


@pytest.mark.parametrize(
    "args, extra",
    [
        (("train", "--data", "data", "--out", "run"), "train"),
        (("demo", "--steps", "10"), "train"),
        (("make-data", "data", "--rows", "100", "--dim", "4"), "train"),
        (("postmortem", "run"), "train"),
        (("plot", "run"), "plot"),
    ],
)
def test_a_missing_extra_is_one_line_naming_the_install_command(base_venv, tmp_path, args, extra):
    result = _nozero_train(base_venv, *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.endswith(f"pip install 'nozero[{extra}]'"), line
    assert f"nozero-train {args[0]} needs the [{extra}] extra" in line
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_help_works_on_the_base_install(base_venv, tmp_path):
    result = _nozero_train(base_venv, "train", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--warmup-steps" in result.stdout and "(default: 2000)" in result.stdout
