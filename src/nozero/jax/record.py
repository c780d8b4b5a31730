"""The per-step record: a step's metrics reduced on the device to one small float vector.

A step reports ``loss`` and either ``grad_norm`` or ``grads`` (reduced here with
``optax.tree.norm``); any other scalar metric is recorded beside them, in sorted
order. One vector per step (not one output per metric) keeps the step's extra kernels
and the sync's fetch small.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

LOSS = "loss"
GRAD_NORM = "grad_norm"
GRADS = "grads"


def all_finite(tree: Any) -> jax.Array:
    """One boolean: every floating-point element of ``tree`` is finite."""
    leaves = [leaf for leaf in jax.tree.leaves(tree) if jnp.issubdtype(leaf.dtype, jnp.inexact)]
    if not leaves:
        return jnp.bool_(True)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def record_fields(metrics: Mapping[str, Any]) -> tuple[str, ...]:
    """The record's field names for ``metrics``: loss, grad norm, then the other scalars."""
    if not isinstance(metrics, Mapping) or LOSS not in metrics:
        kind = type(metrics).__name__
        raise TypeError(
            f"a guarded step must return (state, metrics) with metrics a mapping "
            f"holding {LOSS!r}; got {kind}"
            + (f" with keys {sorted(metrics)}" if isinstance(metrics, Mapping) else "")
        )
    if GRAD_NORM not in metrics and GRADS not in metrics:
        raise TypeError(
            f"a guarded step's metrics must hold {GRAD_NORM!r} or {GRADS!r} beside "
            f"{LOSS!r}; got keys {sorted(metrics)}"
        )
    # Sorted, as JAX orders a dict's keys: a scan's stacked metrics come back that way.
    extra = tuple(sorted(k for k in metrics if k not in (LOSS, GRAD_NORM, GRADS)))
    return (LOSS, GRAD_NORM, *extra)


def step_record(
    metrics: Mapping[str, Any], fields: tuple[str, ...], steps: int | None
) -> jax.Array:
    """``metrics`` as a float32 vector ``[fields]`` (``[steps, fields]`` for a multi-step)."""
    shape = () if steps is None else (steps,)
    values = dict(metrics)
    if GRAD_NORM not in values:
        norm = optax.tree.norm if steps is None else jax.vmap(optax.tree.norm)
        values[GRAD_NORM] = norm(values[GRADS])
    columns = []
    for name in fields:
        value = jnp.asarray(values[name])
        if value.shape != shape:
            per = "a scalar" if steps is None else f"one value per step, shape {shape}"
            raise ValueError(f"metric {name!r} has shape {value.shape}; the guard records {per}")
        columns.append(value.astype(jnp.float32))
    return jnp.stack(columns, axis=-1)


def columns(records: list[np.ndarray], fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Fetched records (``[fields]`` or ``[steps, fields]`` each) as one column per field."""
    if not records:
        return {k: np.zeros(0, np.float32) for k in fields}
    host = np.concatenate([np.asarray(r).reshape(-1, len(fields)) for r in records])
    return {k: host[:, i] for i, k in enumerate(fields)}


def first_bad(values: Mapping[str, np.ndarray]) -> int | None:
    """Position of the first step whose loss or gradient norm is non-finite."""
    finite = np.isfinite(values[LOSS]) & np.isfinite(values[GRAD_NORM])
    return None if finite.all() else int(np.argmin(finite))
