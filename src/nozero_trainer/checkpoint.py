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
import math
import os
import secrets
import shutil
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
FORMAT_VERSION = 1
TREES = ("params", "opt_state")


class CheckpointError(ValueError):
    """A checkpoint that cannot be trusted: missing, truncated, corrupted or for another model."""


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint restored into the caller's pytree structure."""

    path: Path
    step: int
    params: Any
    opt_state: Any
    config: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)


# --- atomic files ---------------------------------------------------------------------------


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically.

    Whatever the body writes to the temporary path becomes ``path`` in one ``os.replace``;
    on any error the temporary file is removed and an existing ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new content, never half."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


# --- pytrees <-> named arrays ---------------------------------------------------------------


def _key_name(key: Any) -> str:
    for attr in ("key", "idx", "name"):  # DictKey / FlattenedIndexKey, SequenceKey, GetAttrKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def array_name(path: tuple[Any, ...]) -> str:
    """A stable, readable name for a pytree leaf from its key path (``layers/0/w``)."""
    return "/".join(_key_name(key) for key in path) or "value"


def tree_to_arrays(tree: Any) -> dict[str, np.ndarray]:
    """Flatten a pytree (dicts, lists, optax NamedTuples) into ``{name: host array}``."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    arrays: dict[str, np.ndarray] = {}
    for path, leaf in leaves:
        name = array_name(path)
        if name in arrays:
            raise ValueError(f"two pytree leaves share the array name {name!r}")
        arrays[name] = np.asarray(leaf)
    return arrays


def nonfinite_leaves(tree: Any) -> list[str]:
    """Names of the floating-point leaves holding a NaN or an infinity."""
    return _nonfinite_names(tree_to_arrays(tree))


def _nonfinite_names(arrays: Mapping[str, np.ndarray]) -> list[str]:
    return [
        name
        for name, array in arrays.items()
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all()
    ]


def arrays_to_tree(template: Any, arrays: Mapping[str, np.ndarray], source: str) -> Any:
    """Rebuild ``template``'s structure from named arrays, checking names, shapes and dtypes.

    ``template`` is a tree of the expected structure, e.g. ``optimizer.init(params)`` for the
    optimizer state (optax states are NamedTuples that only their own code knows how to build).
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    expected = {array_name(path): np.asarray(leaf) for path, leaf in leaves}
    problems = [f"missing array {name!r}" for name in expected if name not in arrays]
    problems += [f"unexpected array {name!r}" for name in arrays if name not in expected]
    for name, want in expected.items():
        got = arrays.get(name)
        if got is not None and (got.shape != want.shape or got.dtype != want.dtype):
            problems.append(
                f"array {name!r} is {got.dtype}{list(got.shape)}, "
                f"the model needs {want.dtype}{list(want.shape)}"
            )
    if problems:
        raise CheckpointError(f"{source}: does not match the model: " + "; ".join(problems))
    restored = [jax.numpy.asarray(arrays[array_name(path)]) for path, _ in leaves]
    return jax.tree_util.tree_unflatten(treedef, restored)


def array_sha256(array: np.ndarray) -> str:
    """sha256 of an array's bytes in C order (shape and dtype are recorded beside it)."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Write ``arrays`` uncompressed and return their manifest entries (sha256, shape, dtype)."""
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    return {
        name: {"sha256": array_sha256(a), "shape": list(a.shape), "dtype": str(a.dtype)}
        for name, a in arrays.items()
    }


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` without pickle; a damaged file names itself."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError as err:
        raise CheckpointError(f"{path}: file is missing") from err
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as err:
        raise CheckpointError(f"{path}: unreadable or truncated ({err})") from err


def verify_arrays(path: Path, arrays: Mapping[str, np.ndarray], entries: Mapping[str, Any]) -> None:
    """Check ``arrays`` read from ``path`` against the manifest entries written with them."""
    missing = sorted(set(entries) - set(arrays))
    extra = sorted(set(arrays) - set(entries))
    if missing or extra:
        raise CheckpointError(
            f"{path}: arrays differ from the manifest (missing {missing}, unexpected {extra})"
        )
    for name, entry in entries.items():
        digest = array_sha256(arrays[name])
        if digest != entry["sha256"]:
            raise CheckpointError(
                f"{path}: array {name!r} fails its sha256 check "
                f"(manifest {entry['sha256'][:12]}…, file {digest[:12]}…)"
            )


# --- run configuration ----------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} into a run configuration")


def config_to_json(config: Mapping[str, Any], sort_keys: bool = True) -> str:
    """The run configuration as stable, diffable JSON (``sort_keys=False`` keeps an order)."""
    return json.dumps(config, indent=2, sort_keys=sort_keys, default=_json_default) + "\n"


def normalise_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration as it reads back from JSON (tuples become lists, paths strings)."""
    return json.loads(config_to_json(config))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def config_differences(
    saved: Mapping[str, Any], current: Mapping[str, Any], ignore: tuple[str, ...] = ()
) -> list[str]:
    """Name every setting whose saved value differs from the current one.

    Both sides are compared as they read back from JSON, so ``(512, 256)`` equals
    ``[512, 256]``. ``ignore`` lists settings allowed to change between runs.
    """
    saved_n, current_n = normalise_config(saved), normalise_config(current)
    differences = []
    for key in sorted(set(saved_n) | set(current_n)):
        if key in ignore:
            continue
        old, new = saved_n.get(key, "<absent>"), current_n.get(key, "<absent>")
        if not _same(old, new):
            differences.append(f"{key}: run directory has {old!r}, command line has {new!r}")
    return differences


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
) -> Path:
    """Write a complete checkpoint, point ``latest`` at it, and prune old ones.

    ``step`` is the number of optimizer steps already applied to ``params``; NaN or Inf in
    any array is refused with ``CheckpointError`` before anything is written. ``state`` is
    whatever else the loop needs to resume exactly (a learning-rate scale, restart count).
    The caller guarantees every step up to ``step`` was confirmed finite. ``keep`` older
    checkpoints (at least the one ``latest`` names) survive pruning.
    """
    # Each tree is fetched to the host once: the same arrays are checked, then written.
    arrays = {"params": tree_to_arrays(params), "opt_state": tree_to_arrays(opt_state)}
    for tree in TREES:
        bad = _nonfinite_names(arrays[tree])
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
    _prune(root, keep=max(1, keep), protect=name)
    return final


def _prune(root: Path, keep: int, protect: str) -> None:
    """Remove leftovers of interrupted saves and all but the newest ``keep`` checkpoints."""
    for leftover in root.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    complete = sorted(p for p in root.glob("step-*") if p.is_dir())  # zero-padded: by step
    for old in complete[:-keep]:
        if old.name != protect:
            shutil.rmtree(old, ignore_errors=True)


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
