"""The real ``pre-commit`` runs the ``nozero`` hook from a fresh clone of this repository,
configured exactly as the docs' pre-commit page shows (both forms), and a real
``git commit`` of ``nan_to_num`` over gradients is blocked until the step raises instead."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docs_blocks import code_blocks

from .conftest import BAD_LINE, BAD_SOURCE, GOOD_SOURCE, REPO_ROOT, write

PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
HEAVY = {"numpy", "jax", "jaxlib", "optax", "pyarrow", "pytest", "hypothesis", "matplotlib"}
PAGE = "lint/pre-commit.md"
CLONE_PLACEHOLDER = "/path/to/nozero"
COMMIT_PLACEHOLDER = re.compile(r"\b[0-9a-f]{40}\b")


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _snippet(first_line: str) -> str:
    """The page's yaml block whose first real line (after the file-name comment) starts
    with ``first_line``."""
    [block] = [
        block for block in code_blocks(PAGE, "yaml") if block.splitlines()[2].startswith(first_line)
    ]
    return block


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    """A fresh clone of this repository's committed HEAD, and an environment for git."""
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.fail("the pre-commit test needs this repository as a git checkout and git")
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path_factory.mktemp("pre_commit_home")),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    env.pop("PRE_COMMIT", None)
    path = tmp_path_factory.mktemp("clone") / "nozero"
    _run(["git", "clone", "-q", str(REPO_ROOT), str(path)], path.parent, env).check_returncode()
    head = _run(["git", "rev-parse", "HEAD"], path, env).stdout.strip()
    return path, head, env


def _user_repo(root: Path, config: str, env: dict[str, str]) -> Path:
    """A user's repository with ``config`` as its pre-commit config, the hook installed."""
    root.mkdir()
    _run(["git", "init", "-q", "."], root, env).check_returncode()
    write(root / ".pre-commit-config.yaml", config)
    _run([str(PRE_COMMIT), "install"], root, env).check_returncode()
    return root


def _blocks_bad_commit_then_accepts_the_fix(repo: Path, env: dict[str, str], code: str) -> None:
    write(repo / "train.py", BAD_SOURCE)
    write(repo / "README.txt", "jnp.nan_to_num(grads) in a text file is not Python\n")
    _run(["git", "add", "-A"], repo, env).check_returncode()
    blocked = _run(["git", "commit", "-q", "-m", "train step"], repo, env)
    report = blocked.stdout + blocked.stderr  # git hands the hook's output to stderr
    assert blocked.returncode != 0, report
    assert f"train.py:{BAD_LINE}:" in report and code in report
    assert "README.txt" not in report  # types: [python]
    assert _run(["git", "rev-parse", "--verify", "HEAD"], repo, env).returncode != 0

    write(repo / "train.py", GOOD_SOURCE)
    _run(["git", "add", "-A"], repo, env).check_returncode()
    done = _run(["git", "commit", "-q", "-m", "train step"], repo, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed" in done.stdout + done.stderr


@pytest.fixture(scope="module")
def pinned_repo(clone, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The page's first form: ``repo:`` the clone's path, ``rev:`` its commit."""
    path, head, env = clone
    snippet = _snippet("-   repo: /")
    config = COMMIT_PLACEHOLDER.sub(head, snippet.replace(CLONE_PLACEHOLDER, str(path)))
    assert head in config and str(path) in config
    return _user_repo(tmp_path_factory.mktemp("pinned") / "repo", config, env), env


def test_pinned_clone_form_blocks_a_bad_commit(pinned_repo, nan_code):
    repo, env = pinned_repo
    _blocks_bad_commit_then_accepts_the_fix(repo, env, nan_code)


def test_pinned_clone_form_installs_libcst_and_nothing_heavy(pinned_repo):
    repo, env = pinned_repo
    _run([str(PRE_COMMIT), "install-hooks"], repo, env).check_returncode()
    [python] = Path(env["PRE_COMMIT_HOME"]).glob("repo*/py_env-*/bin/python")
    listed = _run([str(python), "-m", "pip", "list", "--format=json"], repo, env)
    listed.check_returncode()
    installed = {row["name"].lower() for row in json.loads(listed.stdout)}
    assert {"nozero", "libcst"} <= installed
    assert not installed & HEAVY, installed & HEAVY


def test_local_form_with_nozero_installed_from_the_clone_blocks_a_bad_commit(
    clone, tmp_path, nan_code
):
    """The page's ``repo: local`` form, with nozero installed as getting started says
    (``pip install .`` in the clone) into a fresh virtual environment."""
    path, _, env = clone
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env).check_returncode()
    installed = _run([str(venv / "bin" / "pip"), "install", "-q", "."], path, env)
    assert installed.returncode == 0, installed.stderr
    env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}
    repo = _user_repo(tmp_path / "repo", _snippet("-   repo: local"), env)
    _blocks_bad_commit_then_accepts_the_fix(repo, env, nan_code)


def test_readme_shows_the_pages_pinned_form():
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert _snippet("-   repo: /") in re.findall(r"```yaml\n(.*?)```", readme, re.S)
