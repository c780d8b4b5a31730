"""Replaying a halted step on the host, in float32 or float64, with the trainer's own code.

The float64 re-run uses JAX itself under ``jax.enable_x64`` rather than a numpy copy of the
model and loss: a second implementation would drift from the real one, and a diagnosis of
code that is not the code that failed is worth little. The replay casts parameters and
inputs to float64 and runs the very same loss function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nozero_trainer.loss import multilabel_focal_loss
from nozero_trainer.model import apply_model
from nozero_trainer.pytree_npz import tree_to_arrays

# A loss function the replay can run: (params, batch) -> (loss, aux). ``aux["terms"]`` maps
# each loss term's name to its per-head values; ``aux["stages"]`` optionally lists the
# forward pass's intermediate arrays in order, e.g. [("hidden 0", h0), ("logits", z)].
LossWithAux = Callable[[Any, Mapping[str, Any]], tuple[Any, Mapping[str, Any]]]


@dataclass
class StepReplay:
    """One step replayed on the host: values, where they first went non-finite, bad leaves."""

    dtype: str
    loss: float
    grad_norm: float
    terms: dict[str, list[float]]
    nonfinite_stages: list[str]
    nonfinite_grad_leaves: list[str]
    grad_leaf_count: int
    # Set when the optimizer was replayed too: the guard also stops on an overflowing update.
    update_norm: float | None = None
    largest_abs_update: float | None = None
    nonfinite_update_leaves: list[str] = field(default_factory=list)

    @property
    def finite(self) -> bool:
        values = [self.loss, self.grad_norm]
        values += [] if self.update_norm is None else [self.update_norm]
        return all(math.isfinite(v) for v in values) and not self.nonfinite_update_leaves


def _to_float(value: Any) -> float:
    return float(np.asarray(value))


def _as_dtype(tree: Any, dtype: Any) -> Any:
    """Cast the floating leaves of a tree; integer leaves (labels, counts) stay as they are."""

    def cast(leaf: Any) -> Any:
        array = jnp.asarray(leaf)
        return array.astype(dtype) if jnp.issubdtype(array.dtype, jnp.floating) else array

    return jax.tree_util.tree_map(cast, tree)


def replay_step(
    loss_with_aux: LossWithAux,
    params: Any,
    batch: Mapping[str, Any],
    float64: bool = False,
    optimizer: optax.GradientTransformation | None = None,
    opt_state: Any = None,
) -> StepReplay:
    """Run one step on the host, in float32 or (``float64``) float64.

    With ``optimizer`` and ``opt_state`` the update is replayed as well, because a step
    whose loss and gradients are finite can still overflow in the update.
    """
    if not float64:
        return _replay(loss_with_aux, params, batch, optimizer, opt_state)
    with jax.enable_x64(True):
        wide = [_as_dtype(tree, jnp.float64) for tree in (params, batch, opt_state)]
        return _replay(loss_with_aux, wide[0], wide[1], optimizer, wide[2])


def _replay(
    loss_with_aux: LossWithAux,
    params: Any,
    batch: Mapping[str, Any],
    optimizer: optax.GradientTransformation | None,
    opt_state: Any,
) -> StepReplay:
    stage_names: list[str] = []

    def arrays_only(params: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        # jit returns arrays only: the stage names are collected while tracing.
        loss, aux = loss_with_aux(params, batch)
        stage_names[:] = [name for name, _ in aux.get("stages", [])]
        return loss, {"terms": aux["terms"], "stages": [v for _, v in aux.get("stages", [])]}

    # One compiled replay is far quicker than dispatching its hundreds of small ops eagerly.
    (loss, aux), grads = jax.jit(jax.value_and_grad(arrays_only, has_aux=True))(params, batch)
    grad_arrays = tree_to_arrays(grads)
    stages = [
        name
        for name, value in zip(stage_names, aux["stages"], strict=True)
        if not np.isfinite(value).all()
    ]
    terms = {
        name: np.asarray(v, dtype=np.float64).ravel().tolist() for name, v in aux["terms"].items()
    }
    replay = StepReplay(
        dtype=str(jnp.asarray(loss).dtype),
        loss=_to_float(loss),
        grad_norm=_to_float(optax.tree.norm(grads)),
        terms=terms,
        nonfinite_stages=stages,
        nonfinite_grad_leaves=[n for n, g in grad_arrays.items() if not np.isfinite(g).all()],
        grad_leaf_count=len(grad_arrays),
    )
    if optimizer is not None:
        updates, _ = jax.jit(optimizer.update)(grads, opt_state, params)
        new_params = tree_to_arrays(optax.apply_updates(params, updates))
        update_arrays = tree_to_arrays(updates)
        replay.update_norm = _to_float(optax.tree.norm(updates))  # as the guard computes it
        replay.largest_abs_update = max(
            (float(np.max(np.abs(u))) for u in update_arrays.values() if u.size), default=0.0
        )
        replay.nonfinite_update_leaves = [
            name
            for name, u in update_arrays.items()
            if not (np.isfinite(u).all() and np.isfinite(new_params[name]).all())
        ]
    return replay


def trainer_loss_with_aux(
    config: Any, head_weights: np.ndarray, head_mask: np.ndarray
) -> LossWithAux:
    """The trainer's own model and loss as a replayable function, with per-head terms.

    ``stages`` are each layer's output (``apply_model`` on the first layers only, so the
    model is not written a second time). Per-head BCE, reverse-CE and focal weight come
    from the loss's own stats with the head mask narrowed to one head at a time.
    """

    def loss(params: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        x, y = batch["cls"], batch["labels"]
        dtype = x.dtype
        settings = dict(
            focal_gamma=config.focal_gamma,
            focal_alpha=config.focal_alpha,
            label_smoothing=config.label_smoothing,
            reverse_ce_weight=config.reverse_ce_weight,
        )
        weights = jnp.asarray(head_weights, dtype)
        stages = [
            (f"layer {i} output", apply_model(params[: i + 1], x)) for i in range(len(params))
        ]
        stages[-1] = ("logits", stages[-1][1])
        logits = stages[-1][1]
        total, stats = multilabel_focal_loss(
            logits, y, head_weights=weights, head_mask=jnp.asarray(head_mask, dtype), **settings
        )
        one_head = [
            multilabel_focal_loss(
                logits,
                y,
                head_weights=weights,
                head_mask=jnp.eye(len(head_mask), dtype=dtype)[h],
                **settings,
            )[1]
            for h in range(len(head_mask))
        ]
        terms = {
            name: jnp.stack([s[name] for s in one_head])
            for name in ("bce", "rce", "focal_mean_weight")
        }
        terms["weighted per-head loss"] = stats["per_head"]
        return total, {"terms": terms, "stages": stages}

    return loss


@dataclass
class Repeat:
    """The same float32 step run twice from the same state, compared bit for bit."""

    identical: bool
    differing: list[str]  # outputs whose bits differ between the two runs
    compared: int  # outputs compared (loss, terms, stages, gradients, updates)

    def to_json(self) -> dict[str, Any]:
        return {"identical": self.identical, "differing": self.differing, "compared": self.compared}


def _step_outputs(
    loss_with_aux: LossWithAux, optimizer: optax.GradientTransformation | None
) -> Callable[[Any, Mapping[str, Any], Any], dict[str, Any]]:
    """One jitted function returning every output of the step, each under a name."""
    names: list[str] = []

    def outputs(params: Any, batch: Mapping[str, Any], opt_state: Any) -> dict[str, Any]:
        def loss(params: Any) -> tuple[Any, Any]:
            value, aux = loss_with_aux(params, batch)
            return value, aux

        (value, aux), grads = jax.value_and_grad(loss, has_aux=True)(params)
        out = {"loss": value}
        out.update({f"terms/{k}": v for k, v in aux["terms"].items()})
        out.update({f"stages/{name}": v for name, v in aux.get("stages", [])})
        out["grads"] = grads
        if optimizer is not None:
            out["updates"] = optimizer.update(grads, opt_state, params)[0]
        names[:] = list(out)
        return out

    return jax.jit(outputs)


def repeat_step(
    loss_with_aux: LossWithAux,
    params: Any,
    batch: Mapping[str, Any],
    optimizer: optax.GradientTransformation | None = None,
    opt_state: Any = None,
) -> Repeat:
    """Run the step twice in float32 from the same state and compare every output's bits.

    The same compiled program on the same inputs must give the same bits. When it does
    not, the computation is not deterministic: the hardware or a non-deterministic kernel
    (an atomic reduction) is to suspect, and the failure may be transient.
    """
    step = _step_outputs(loss_with_aux, optimizer)
    first, second = (
        tree_to_arrays(jax.device_get(step(params, batch, opt_state))) for _ in range(2)
    )
    differing = [
        name
        for name, array in first.items()
        if array.dtype != second[name].dtype
        or array.shape != second[name].shape
        or np.ascontiguousarray(array).tobytes() != np.ascontiguousarray(second[name]).tobytes()
    ]
    return Repeat(identical=not differing, differing=differing, compared=len(first))
