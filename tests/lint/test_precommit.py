"""The real ``pre-commit`` runs this repository's ``nozero`` hook on a temporary git
repository: it fails on ``nan_to_num`` over gradients and passes once that is fixed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BAD_LINE, BAD_SOURCE, GOOD_SOURCE, REPO_ROOT, write

PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
HEAVY = {"numpy", "jax", "jaxlib", "optax", "pyarrow", "pytest", "hypothesis", "matplotlib"}


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A user's repository whose config points at this repository's committed HEAD."""
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.fail("the pre-commit test needs this repository as a git checkout and git")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    repo = tmp_path_factory.mktemp("user_repo")
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path_factory.mktemp("pre_commit_home")),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    env.pop("PRE_COMMIT", None)
    _run(["git", "init", "-q", "."], repo, env).check_returncode()
    write(
        repo / ".pre-commit-config.yaml",
        f"repos:\n-   repo: {REPO_ROOT.as_posix()}\n    rev: {head}\n"
        "    hooks:\n    -   id: nozero\n",
    )
    return repo, env


def test_hook_fails_on_nan_to_num_over_gradients_and_passes_once_fixed(hook_repo, nan_code):
    repo, env = hook_repo
    write(repo / "train.py", BAD_SOURCE)
    write(repo / "README.txt", "jnp.nan_to_num(grads) in a text file is not Python\n")
    _run(["git", "add", "-A"], repo, env).check_returncode()
    failed = _run([str(PRE_COMMIT), "run", "--all-files"], repo, env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"train.py:{BAD_LINE}:" in failed.stdout and nan_code in failed.stdout
    assert "README.txt" not in failed.stdout  # types: [python]

    write(repo / "train.py", GOOD_SOURCE)
    _run(["git", "add", "-A"], repo, env).check_returncode()
    passed = _run([str(PRE_COMMIT), "run", "--all-files"], repo, env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout


def test_hook_environment_holds_libcst_and_nothing_heavy(hook_repo):
    repo, env = hook_repo
    _run([str(PRE_COMMIT), "install-hooks"], repo, env).check_returncode()
    [python] = Path(env["PRE_COMMIT_HOME"]).glob("repo*/py_env-*/bin/python")
    listed = _run([str(python), "-m", "pip", "list", "--format=json"], repo, env)
    listed.check_returncode()
    installed = {row["name"].lower() for row in json.loads(listed.stdout)}
    assert {"nozero", "libcst"} <= installed
    assert not installed & HEAVY, installed & HEAVY
