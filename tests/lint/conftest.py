"""Shared pieces for the tool's tests: sample sources, the real CLI, the rule codes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from nozero.cli import main
from nozero.lint.rules import get_rule

REPO_ROOT = Path(__file__).resolve().parents[2]

# Gradients replaced by nan_to_num: the canonical zero-and-continue.
BAD_SOURCE = textwrap.dedent(
    """\
    import jax
    import jax.numpy as jnp


    def train_step(params, batch):
        grads = jax.grad(loss_fn)(params, batch)
        grads = jnp.nan_to_num(grads)
        return grads
    """
)
BAD_LINE = 7  # the nan_to_num line
# The same step, fixed: a non-finite gradient stops training.
GOOD_SOURCE = textwrap.dedent(
    """\
    import jax
    import jax.numpy as jnp


    def train_step(params, batch):
        grads = jax.grad(loss_fn)(params, batch)
        if not jnp.isfinite(grads).all():
            raise FloatingPointError("non-finite gradient")
        return grads
    """
)
# Holds trigger text: a file without any is not nozero's to parse (NZ001).
# An expression nested 600 deep: more than Python's default recursion limit lets libcst's
# position metadata walk, well within what CPython's parser accepts.
DEEP_SOURCE = "import jax.numpy as jnp\ngrads = " + "a + " * 600 + "jnp.nan_to_num(grads)\n"
SYNTAX_ERROR_SOURCE = "def broken(:\n    return jnp.nan_to_num(grads)\n"


# The rule for nan_to_num applied to training signal (NZ102 is its mapped form).
NAN_CODE = "NZ101"


@pytest.fixture
def nan_code() -> str:
    assert "nan-to-num" in get_rule(NAN_CODE).name
    return NAN_CODE


@dataclass
class Result:
    code: int
    out: str
    err: str

    def lines(self) -> list[str]:
        return self.out.splitlines()


@pytest.fixture
def lint(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """``lint(*args)`` runs ``nozero lint`` in-process (``main``) inside ``tmp_path``,
    with a cache directory of its own, and returns its exit code and output."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str, command: str = "lint") -> Result:
        capsys.readouterr()
        code = main([command, *args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def run_console_script(
    *args: str,
    cwd: Path,
    stdin: bytes | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> Result:
    """The installed ``nozero`` console script, as a user or pre-commit runs it."""
    script = Path(sys.executable).with_name("nozero")
    completed = subprocess.run(
        [str(script), *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})},
    )
    return Result(
        completed.returncode,
        completed.stdout.decode("utf-8"),
        completed.stderr.decode("utf-8"),
    )


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_project(root: Path, modules: dict[str, str]) -> Path:
    """A project at ``root`` (a ``pyproject.toml``) holding ``modules`` (path -> text)."""
    write(root / "pyproject.toml", "[project]\nname = 'p'\n")
    for name, text in modules.items():
        write(root / name, text)
    return root
