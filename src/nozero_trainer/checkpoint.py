"""Checkpoints a run can be killed during: written aside, renamed into place, verified on load.

A checkpoint is a directory ``checkpoints/step-XXXXXXXX-<token>/`` holding

- ``params.npz`` and ``opt_state.npz``: every array of the two pytrees, named by its key path
  (``layers/0/w``, ``1/0/mu/layers/0/w``) so no pickle is ever needed to read them back;
- ``config.json``: the full run configuration (data, shards, heads, seed, hyper-parameters);
- ``manifest.json``: the step, the loop's resumable state, and the sha256, shape and dtype
  of every array and the sha256 of ``config.json``. It is written last.

The directory is assembled under a temporary name and renamed into place, and only then is
``checkpoints/latest`` (a one-line file naming the directory) replaced with ``os.replace``.
A SIGKILL at any moment therefore leaves ``latest`` naming a complete checkpoint (or no
``latest`` at all). Directory names carry a random token, so a resumed run that reaches the
same step again never writes over the checkpoint ``latest`` may still name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nozero._atomic import atomic_write_text, fsync_dir
from nozero_trainer.pytree_npz import (
    ArrayFileError,
    arrays_to_tree,
    nonfinite_names,
    read_npz,
    tree_to_arrays,
    verify_arrays,
    write_npz,
)
from nozero_trainer.run_config import config_differences, config_to_json

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
FORMAT_VERSION = 1
TREES = ("params", "opt_state")


class CheckpointError(ArrayFileError):
    """A checkpoint that cannot be trusted: missing, truncated, corrupted or for another model."""


@contextlib.contextmanager
def _checkpoint_errors() -> Iterator[None]:
    """A damaged array file inside a checkpoint is reported as a damaged checkpoint."""
    try:
        yield
    except CheckpointError:
        raise
    except ArrayFileError as err:
        raise CheckpointError(str(err)) from err


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint restored into the caller's pytree structure."""

    path: Path
    step: int
    params: Any
    opt_state: Any
    config: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)


# --- save / load ----------------------------------------------------------------------------


def checkpoints_dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def save_checkpoint(
    run_dir: str | os.PathLike[str],
    step: int,
    params: Any,
    opt_state: Any,
    config: Mapping[str, Any],
    state: Mapping[str, Any] | None = None,
    keep: int = 3,
    also_keep: str | None = None,
) -> Path:
    """Write a complete checkpoint, point ``latest`` at it, and prune old ones.

    ``step`` is the number of optimizer steps already applied to ``params``; NaN or Inf in
    any array is refused with ``CheckpointError`` before anything is written. ``state`` is
    whatever else the loop needs to resume exactly (a learning-rate scale, restart count).
    The caller guarantees every step up to ``step`` was confirmed finite. ``keep`` older
    checkpoints (at least the one ``latest`` names) survive pruning, and ``also_keep`` (the
    name of an older one a restart may need to roll back to) as well.
    """
    # Each tree is fetched to the host once: the same arrays are checked, then written.
    arrays = {"params": tree_to_arrays(params), "opt_state": tree_to_arrays(opt_state)}
    for tree in TREES:
        bad = nonfinite_names(arrays[tree])
        if bad:  # the last line of defence: a checkpoint is never written from NaN/Inf
            raise CheckpointError(
                f"refusing to checkpoint step {step}: {tree} leaves {bad} are not finite"
            )
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{int(step):08d}-{secrets.token_hex(3)}"
    tmp = root / f".tmp-{name}"
    tmp.mkdir()
    try:
        manifest_arrays = {
            f"{tree}.npz": write_npz(tmp / f"{tree}.npz", arrays[tree]) for tree in TREES
        }
        config_text = config_to_json(config)
        (tmp / "config.json").write_text(config_text, encoding="utf-8")
        manifest = {
            "format": FORMAT_VERSION,
            "step": int(step),
            "state": dict(state or {}),
            "config_sha256": hashlib.sha256(config_text.encode("utf-8")).hexdigest(),
            "arrays": manifest_arrays,
        }
        (tmp / "manifest.json").write_text(config_to_json(manifest), encoding="utf-8")
        for child in tmp.iterdir():
            with open(child, "rb") as handle:
                os.fsync(handle.fileno())
        fsync_dir(tmp)
        final = root / name
        os.rename(tmp, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(root / LATEST, name + "\n")
    _prune(root, keep=max(1, keep), protect={name, also_keep})
    return final


def _prune(root: Path, keep: int, protect: set[str | None]) -> None:
    """Remove leftovers of interrupted saves and all but the newest ``keep`` checkpoints."""
    for leftover in root.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    complete = sorted(p for p in root.glob("step-*") if p.is_dir())  # zero-padded: by step
    for old in complete[:-keep]:
        if old.name not in protect:
            shutil.rmtree(old, ignore_errors=True)


def list_checkpoints(run_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Every complete checkpoint of the run as ``(step, path)``, oldest first."""
    root = checkpoints_dir(run_dir)
    found = []
    for path in sorted(p for p in root.glob("step-*") if p.is_dir()):
        try:
            found.append((int(path.name.split("-")[1]), path))
        except (IndexError, ValueError):
            continue
    return found


def roll_back(run_dir: str | os.PathLike[str], to: Path | None) -> list[Path]:
    """Point ``latest`` at the older checkpoint ``to`` (``None``: at none, a fresh start);
    remove the newer ones and return them.

    The newer checkpoints hold parameters the run judged diverged; left in place, pruning
    would keep them and drop the good one once the restarted run saves again, and a
    ``--resume`` would continue from them.
    """
    root = checkpoints_dir(run_dir)
    if to is None:
        (root / LATEST).unlink(missing_ok=True)
        step = -1
    else:
        atomic_write_text(root / LATEST, to.name + "\n")
        step = int(to.name.split("-")[1])
    newer = [p for s, p in list_checkpoints(run_dir) if s > step or (s == step and p != to)]
    for path in newer:
        shutil.rmtree(path, ignore_errors=True)
    return newer


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The checkpoint ``latest`` names, or ``None`` when the run has none yet."""
    pointer = checkpoints_dir(run_dir) / LATEST
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    target = pointer.parent / name
    if not name or "/" in name or not target.is_dir():
        raise CheckpointError(f"{pointer}: names {name!r}, which is not a checkpoint directory")
    return target


def read_manifest(path: Path) -> dict[str, Any]:
    manifest_path = Path(path) / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise CheckpointError(f"{manifest_path}: file is missing") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{manifest_path}: not valid JSON ({err})") from err
    if manifest.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{manifest_path}: unknown format {manifest.get('format')!r}")
    return manifest


def read_config(path: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    config_path = Path(path) / "config.json"
    try:
        raw = config_path.read_bytes()
    except FileNotFoundError as err:
        raise CheckpointError(f"{config_path}: file is missing") from err
    if hashlib.sha256(raw).hexdigest() != manifest["config_sha256"]:
        raise CheckpointError(f"{config_path}: fails its sha256 check")
    return json.loads(raw)


def verify_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Check a checkpoint's integrity (every file present, readable, sha256 as recorded).

    Returns the manifest. Cheap enough to run on every resume and in tests after a kill.
    """
    path = Path(path)
    manifest = read_manifest(path)
    read_config(path, manifest)
    with _checkpoint_errors():
        for file_name, entries in manifest["arrays"].items():
            verify_arrays(path / file_name, read_npz(path / file_name), entries)
    return manifest


def load_checkpoint(
    path: str | os.PathLike[str],
    params_template: Any,
    opt_state_template: Any,
    expect: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Verify a checkpoint and restore it into the templates' structures.

    ``expect`` holds the settings that define the model (head registry, hidden widths,
    embedding width): a checkpoint saved with other values is refused by name before
    its arrays are even compared, so the error says *why* the shapes differ.
    """
    path = Path(path)
    manifest = read_manifest(path)
    config = read_config(path, manifest)
    mismatches = config_differences(
        {k: config.get(k, "<absent>") for k in expect or {}}, dict(expect or {})
    )
    if mismatches:
        detail = "; ".join(m.replace("command line", "model") for m in mismatches)
        raise CheckpointError(f"{path / 'config.json'}: checkpoint is for another model: {detail}")
    trees = {}
    for tree, template in zip(TREES, (params_template, opt_state_template), strict=True):
        file_path = path / f"{tree}.npz"
        with _checkpoint_errors():
            arrays = read_npz(file_path)
            verify_arrays(file_path, arrays, manifest["arrays"].get(f"{tree}.npz", {}))
            trees[tree] = arrays_to_tree(template, arrays, str(file_path))
    return Checkpoint(
        path=path,
        step=int(manifest["step"]),
        params=trees["params"],
        opt_state=trees["opt_state"],
        config=config,
        state=dict(manifest.get("state", {})),
    )
