"""Strict JSON for every file a run writes: no bare ``NaN`` or ``Infinity``, ever.

``json.dumps`` writes non-finite floats as ``NaN``/``Infinity``, which ``JSON.parse``,
``jq`` and most other readers reject. A non-finite value is written as ``null`` instead,
and the object gains a ``"nonfinite"`` map from the value's path (keys joined by ``/``,
list positions as numbers) to ``"nan"``, ``"inf"`` or ``"-inf"``. :func:`loads` puts the
values back, so Python readers see the floats the writer had.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

NONFINITE = "nonfinite"


def _name(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _join(path: str, key: object) -> str:
    return f"{path}/{key}" if path else str(key)


def _plain(value: Any) -> Any:
    """numpy scalars, tuples and paths as the JSON types they stand for (no numpy import)."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def encode(value: Any, found: dict[str, str] | None = None, path: str = "") -> Any:
    """``value`` with every non-finite float replaced by ``None``, recorded in ``found``."""
    found = {} if found is None else found
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        found[path] = _name(value)
        return None
    if isinstance(value, Mapping):
        return {
            str(k): encode(v, found, f"{path}/{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [encode(v, found, _join(path, i)) for i, v in enumerate(value)]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"cannot write {type(value).__name__} as JSON (at {path or 'the top'})")


def dumps(record: Mapping[str, Any], **options: Any) -> str:
    """One JSON object, strict: non-finite floats become ``null`` plus a ``nonfinite`` entry."""
    found: dict[str, str] = {}
    clean = encode(record, found)
    if found:
        clean[NONFINITE] = found
    return json.dumps(clean, allow_nan=False, **options)


def _restore(record: dict[str, Any]) -> dict[str, Any]:
    for path, name in record.get(NONFINITE, {}).items():
        *parents, last = path.split("/")
        node: Any = record
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = float(name)
        else:
            node[last] = float(name)
    return record


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: bare {name}")


def loads(text: str, accept_bare: bool = False) -> dict[str, Any]:
    """Parse one object and restore its non-finite values.

    A bare ``NaN``/``Infinity`` is an error, unless ``accept_bare`` (files written before
    this format, which a reader still wants to plot or diagnose).
    """
    record = json.loads(text) if accept_bare else json.loads(text, parse_constant=_refuse_constant)
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    return _restore(record)
