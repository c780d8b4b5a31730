"""Pytrees as named arrays in ``.npz`` files, with a sha256 of every array.

Checkpoints and post-mortem bundles store parameters and optimizer states this way: each
leaf is named by its key path (``layers/0/w``, ``1/0/mu/layers/0/w``), so the files read
back without pickle and a reader can compare names, shapes, dtypes and digests.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np


class ArrayFileError(ValueError):
    """An array file that cannot be trusted: missing, truncated, corrupted or mismatched."""


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
    return nonfinite_names(tree_to_arrays(tree))


def nonfinite_names(arrays: Mapping[str, np.ndarray]) -> list[str]:
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
        raise ArrayFileError(f"{source}: does not match the model: " + "; ".join(problems))
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
        raise ArrayFileError(f"{path}: file is missing") from err
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as err:
        raise ArrayFileError(f"{path}: unreadable or truncated ({err})") from err


def verify_arrays(path: Path, arrays: Mapping[str, np.ndarray], entries: Mapping[str, Any]) -> None:
    """Check ``arrays`` read from ``path`` against the manifest entries written with them."""
    missing = sorted(set(entries) - set(arrays))
    extra = sorted(set(arrays) - set(entries))
    if missing or extra:
        raise ArrayFileError(
            f"{path}: arrays differ from the manifest (missing {missing}, unexpected {extra})"
        )
    for name, entry in entries.items():
        digest = array_sha256(arrays[name])
        if digest != entry["sha256"]:
            raise ArrayFileError(
                f"{path}: array {name!r} fails its sha256 check "
                f"(manifest {entry['sha256'][:12]}…, file {digest[:12]}…)"
            )
