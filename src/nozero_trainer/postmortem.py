"""What a halted run leaves behind, and the diagnosis ``nozero-train postmortem DIR`` prints.

When the guard stops a run, the step that went non-finite is replayed on the host from the
parameters and optimizer state of *before* that step (the loop never applied it), and
everything needed to investigate is written into ``RUN_DIR/postmortem/halt-NN-step-SSSSSSSS/``:

- ``halt.json``: step, loss, gradient norm, learning rate, the documented message, the
  per-head loss terms, the forward stages that went non-finite and the parameter leaves
  whose gradients did;
- ``batch.npz``: the offending batch and the row indices it was drawn from;
- ``params.npz``, ``opt_state.npz``: the pre-step state, named like checkpoint arrays;
- ``config.json``: the run configuration.

The float64 re-run uses JAX itself under ``jax.enable_x64`` rather than a numpy copy of the
model and loss: a second implementation would drift from the real one, and a diagnosis of
code that is not the code that failed is worth little. The replay casts parameters and
inputs to float64 and runs the very same loss function.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nozero_trainer.checkpoint import (
    config_to_json,
    fsync_dir,
    nonfinite_leaves,
    read_npz,
    tree_to_arrays,
    write_npz,
)
from nozero_trainer.loss import multilabel_focal_loss
from nozero_trainer.model import apply_model

POSTMORTEM_DIR = "postmortem"
ROW_INDICES = "row_indices"
# Trained weights of this model stay far below this; past it the run has diverged.
LARGE_PARAM = 1e6

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


@dataclass
class Bundle:
    """A post-mortem bundle read back from disk."""

    path: Path
    halt: dict[str, Any]
    batch: dict[str, np.ndarray]
    row_indices: np.ndarray
    params: dict[str, np.ndarray]
    opt_state: dict[str, np.ndarray]
    config: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)


# --- replay ---------------------------------------------------------------------------------


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


# --- writing and reading bundles ------------------------------------------------------------


def write_bundle(
    run_dir: str | os.PathLike[str],
    *,
    step: int,
    loss: float,
    grad_norm: float,
    learning_rate: float,
    message: str,
    batch: Mapping[str, Any],
    row_indices: Any,
    params: Any,
    opt_state: Any,
    replay: StepReplay,
    config: Mapping[str, Any],
    heads: Sequence[str],
    restart: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a post-mortem bundle into ``run_dir/postmortem`` (assembled aside, then renamed).

    ``extra`` goes into ``halt.json`` as it is: whatever the replay needs beyond the
    configuration (the loss's per-head weights and mask, for instance).
    """
    root = Path(run_dir) / POSTMORTEM_DIR
    root.mkdir(parents=True, exist_ok=True)
    number = len(list(root.glob("halt-*"))) + 1
    name = f"halt-{number:02d}-step-{int(step):08d}"
    tmp = root / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    batch_arrays = {key: np.asarray(value) for key, value in batch.items()}
    batch_arrays[ROW_INDICES] = np.asarray(row_indices)
    write_npz(tmp / "batch.npz", batch_arrays)
    param_arrays = tree_to_arrays(params)
    write_npz(tmp / "params.npz", param_arrays)
    write_npz(tmp / "opt_state.npz", tree_to_arrays(opt_state))
    (tmp / "config.json").write_text(config_to_json(config), encoding="utf-8")
    halt = {
        "step": int(step),
        "loss": float(loss),
        "grad_norm": float(grad_norm),
        "learning_rate": float(learning_rate),
        "message": message,
        "restart": int(restart),
        "heads": list(heads),
        "loss_terms": {
            term: dict(zip(heads, values, strict=False)) for term, values in replay.terms.items()
        },
        "nonfinite_stages": replay.nonfinite_stages,
        "nonfinite_grad_leaves": replay.nonfinite_grad_leaves,
        "grad_leaf_count": replay.grad_leaf_count,
        "replay": {"dtype": replay.dtype, "loss": replay.loss, "grad_norm": replay.grad_norm},
        "update_norm": replay.update_norm,
        "largest_abs_update": replay.largest_abs_update,
        "nonfinite_update_leaves": replay.nonfinite_update_leaves,
        "nonfinite_param_leaves": nonfinite_leaves(params),
        "largest_abs_param": max(
            (float(np.max(np.abs(a))) for a in param_arrays.values() if a.size),
            default=0.0,
        ),
        **dict(extra or {}),
    }
    # Unsorted: loss terms keep their order of computation, heads the registry's order.
    (tmp / "halt.json").write_text(config_to_json(halt, sort_keys=False), encoding="utf-8")
    final = root / name
    os.rename(tmp, final)
    fsync_dir(root)
    return final


def find_bundles(path: str | os.PathLike[str]) -> list[Path]:
    """Bundles at ``path``: the bundle itself, or every bundle of a run directory, oldest first."""
    path = Path(path)
    if (path / "halt.json").is_file():
        return [path]
    return sorted(p for p in (path / POSTMORTEM_DIR).glob("halt-*") if (p / "halt.json").is_file())


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of a ``metrics.jsonl``; a torn last line (the process was killed) is skipped."""
    records = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number != len(lines):
                raise ValueError(f"{path}: line {number} is not JSON ({err})") from err
    return records


def read_bundle(path: str | os.PathLike[str], metrics_file: str = "metrics.jsonl") -> Bundle:
    """Read a bundle and the metrics history of the run it belongs to."""
    path = Path(path)
    try:
        halt = json.loads((path / "halt.json").read_text(encoding="utf-8"))
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ValueError(f"{err.filename}: not a post-mortem bundle (file is missing)") from err
    batch = read_npz(path / "batch.npz")
    row_indices = batch.pop(ROW_INDICES)
    run_dir = path.parent.parent
    return Bundle(
        path=path,
        halt=halt,
        batch=batch,
        row_indices=row_indices,
        params=read_npz(path / "params.npz"),
        opt_state=read_npz(path / "opt_state.npz"),
        config=config,
        history=read_metrics(run_dir / metrics_file),
    )


# --- diagnosis ------------------------------------------------------------------------------


def nonfinite_inputs(
    batch: Mapping[str, np.ndarray], row_indices: np.ndarray
) -> list[tuple[str, int, int, list[int]]]:
    """``(field, batch row, data row, columns)`` for every batch row holding NaN or Inf."""
    found = []
    for name, array in batch.items():
        array = np.asarray(array)
        if not np.issubdtype(array.dtype, np.floating) or array.ndim == 0:
            continue
        bad = ~np.isfinite(array.reshape(array.shape[0], -1))
        for row in np.flatnonzero(bad.any(axis=1)):
            data_row = int(row_indices[row]) if row < len(row_indices) else -1
            found.append((name, int(row), data_row, np.flatnonzero(bad[row]).tolist()))
    return found


def _fmt(value: float) -> str:
    return f"{value:.6g}" if math.isfinite(value) else str(value)


def _limited(items: Sequence[Any], limit: int = 8) -> str:
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def _term_heads(loss_terms: Mapping[str, Mapping[str, float]]) -> list[tuple[str, list[str]]]:
    return [
        (term, [head for head, value in per_head.items() if not math.isfinite(value)])
        for term, per_head in loss_terms.items()
    ]


def history_before(history: Sequence[Mapping[str, Any]], step: int, count: int = 10) -> list[dict]:
    """The last ``count`` logged training steps before ``step`` (evaluations left out)."""
    steps = [
        r
        for r in history
        if r.get("event") in (None, "train") and "loss" in r and int(r.get("step", step)) < step
    ]
    return [dict(r) for r in steps[-count:]]


def diagnose(bundle: Bundle, float64_replay: StepReplay | None) -> str:
    """A diagnosis a person can act on, as text."""
    halt = bundle.halt
    lines = [
        f"post-mortem bundle: {bundle.path}",
        f"halted at step {halt['step']}: loss={_fmt(halt['loss'])} "
        f"grad_norm={_fmt(halt['grad_norm'])} learning rate={halt['learning_rate']:.6g}"
        + (f" (after {halt['restart']} restart(s))" if halt.get("restart") else ""),
        f"  {halt['message']}",
        "",
    ]
    bad_inputs = nonfinite_inputs(bundle.batch, bundle.row_indices)
    if bad_inputs:
        rows = sorted({entry[1] for entry in bad_inputs})
        lines.append(f"inputs: {len(rows)} of {len(bundle.row_indices)} batch rows hold NaN/Inf")
        for name, row, data_row, cols in bad_inputs[:10]:
            lines.append(
                f"  field {name!r}: batch row {row} (data row {data_row}), columns {_limited(cols)}"
            )
        if len(bad_inputs) > 10:
            lines.append(f"  … {len(bad_inputs) - 10} more rows")
        lines.append("  → the inputs are broken: fix the data or the loader, not the model.")
    else:
        lines.append("inputs: every value of the batch is finite")

    bad_params = halt.get("nonfinite_param_leaves", [])
    if bad_params:
        lines.append(
            f"parameters before the step: NaN/Inf in {_limited(bad_params)} (an earlier "
            "update overflowed: look at the learning rate and gradient norm history)"
        )
    stages = halt.get("nonfinite_stages", [])
    term_heads = [(t, h) for t, h in _term_heads(halt.get("loss_terms", {})) if h]
    if stages:
        lines.append(f"first non-finite stage of the forward pass: {stages[0]}")
    every_head = len(halt.get("heads", [])) or None

    def which(heads: list[str]) -> str:
        return "every head" if len(heads) == every_head else f"heads {_limited(heads)}"

    if term_heads:
        term, heads = term_heads[0]
        lines.append(f"first non-finite loss term: {term!r}, for {which(heads)}")
        for term, heads in term_heads[1:]:
            lines.append(f"  then: {term!r}, for {which(heads)}")
    elif not stages:
        lines.append("loss terms: all finite")
    leaves = halt.get("nonfinite_grad_leaves", [])
    total = halt.get("grad_leaf_count", "?")
    if leaves:
        lines.append(f"non-finite gradients in {len(leaves)} of {total} parameter leaves:")
        lines.append(f"  {_limited(leaves, 12)}")
    else:
        lines.append(f"gradients: finite in all {total} parameter leaves")
    lines.extend(_update_lines(halt))

    lines.append("")
    history = history_before(bundle.history, int(halt["step"]))
    if history:
        lines.append(f"the {len(history)} logged steps before the halt:")
        lines.append(f"  {'step':>8} {'loss':>12} {'grad_norm':>12} {'lr':>12}")
        for record in history:
            lines.append(
                f"  {record['step']:>8} {_fmt(float(record['loss'])):>12} "
                f"{_fmt(float(record.get('grad_norm', math.nan))):>12} "
                f"{_fmt(float(record.get('lr', math.nan))):>12}"
            )
        norms = [float(r.get("grad_norm", math.nan)) for r in history]
        if len(norms) >= 3 and all(math.isfinite(n) for n in norms) and norms[-1] > 10 * min(norms):
            lines.append("  → the gradient norm grew steeply before the halt: the run diverged;")
            lines.append("    try a lower --peak-lr or a longer warmup.")
    else:
        lines.append("no logged steps before the halt (metrics.jsonl has none)")

    lines.append("")
    lines.extend(_precision_verdict(float64_replay, bool(bad_inputs), halt))
    return "\n".join(lines) + "\n"


def _update_lines(halt: Mapping[str, Any]) -> list[str]:
    """What the optimizer update did, when the bundle recorded it."""
    norm = halt.get("update_norm")
    if norm is None:
        return []
    bad = halt.get("nonfinite_update_leaves", [])
    largest = float(halt.get("largest_abs_update") or 0.0)
    if bad:
        return [
            f"non-finite update or updated parameters in {len(bad)} leaves: {_limited(bad, 12)}",
            f"  (the learning rate was {halt['learning_rate']:.3g})",
        ]
    if not math.isfinite(float(norm)):
        return [
            f"update: every value finite (largest |{largest:.3g}|), but its norm overflows "
            "float32:",
            f"  the learning rate {halt['learning_rate']:.3g} makes the step far too large.",
        ]
    return [f"update: finite (norm {_fmt(float(norm))}, largest |{largest:.3g}|)"]


def _precision_verdict(
    replay: StepReplay | None, bad_inputs: bool, halt: Mapping[str, Any]
) -> list[str]:
    if replay is None:
        return ["float64 re-run: not run"]
    if replay.dtype != "float64":
        return [f"float64 re-run: not possible, the loss is computed in {replay.dtype}"]
    head = (
        f"float64 re-run of the step: loss={_fmt(replay.loss)} grad_norm={_fmt(replay.grad_norm)}"
    )
    if replay.update_norm is not None:
        head += f" update_norm={_fmt(replay.update_norm)}"
    blown_up = max(
        float(halt.get("largest_abs_param") or 0.0), float(halt.get("largest_abs_update") or 0.0)
    )
    if replay.finite and blown_up > LARGE_PARAM:
        return [
            head,
            f"  → finite in float64 only thanks to its wider range: weights or updates reach "
            f"|{blown_up:.3g}|,",
            "    so the run diverged (learning rate too high); more precision would only",
            "    postpone the overflow. Lower --peak-lr or lengthen --warmup-steps.",
        ]
    if replay.finite:
        return [
            head,
            "  → finite in float64: this is a precision problem (float32 overflow or",
            "    underflow in the step), not broken data or divergence.",
        ]
    cause = "the inputs themselves" if bad_inputs else "the values, not the precision"
    return [
        head,
        f"  → still non-finite in float64: not a precision problem; the cause is {cause}.",
    ]


def diagnose_path(path: str | os.PathLike[str]) -> str:
    """``nozero-train postmortem DIR``: diagnose the newest bundle at ``path`` (a bundle or a run).

    The pre-step parameters are restored into the model's own structure (rebuilt from the
    bundle's configuration) and the step is replayed in float64 with the trainer's loss.
    """
    from nozero_trainer.checkpoint import arrays_to_tree
    from nozero_trainer.config import TrainConfig
    from nozero_trainer.model import init_params
    from nozero_trainer.optim import make_optimizer

    bundles = find_bundles(path)
    if not bundles:
        raise ValueError(f"{path}: no post-mortem bundle here (the run never halted?)")
    bundle = read_bundle(bundles[-1])
    settings = {f: bundle.config[f] for f in TrainConfig.__dataclass_fields__ if f in bundle.config}
    config = TrainConfig.from_dict(settings)
    in_dim = int(bundle.batch["cls"].shape[1])
    template = init_params(jax.random.PRNGKey(0), in_dim, config.hidden_dims, len(config.heads))
    params = arrays_to_tree(template, bundle.params, str(bundle.path / "params.npz"))
    loss = trainer_loss_with_aux(
        config,
        np.asarray(bundle.halt["head_weights"], np.float32),
        np.asarray(bundle.halt["head_mask"], np.float32),
    )
    optimizer = make_optimizer(config)
    opt_state = arrays_to_tree(
        optimizer.init(params), bundle.opt_state, str(bundle.path / "opt_state.npz")
    )
    replay = replay_step(loss, params, bundle.batch, True, optimizer, opt_state)
    text = diagnose(bundle, replay)
    if len(bundles) > 1:
        older = ", ".join(b.name for b in bundles[:-1])
        text += f"\nearlier halts of this run (diagnose each by its path): {older}\n"
    return text
