"""What ``nozero-train postmortem DIR`` prints: what broke, where, and whether it repeats."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from nozero_trainer.config import TrainConfig
from nozero_trainer.model import init_params
from nozero_trainer.optim import make_optimizer
from nozero_trainer.postmortem.bundle import Bundle, find_bundles, read_bundle
from nozero_trainer.postmortem.replay import (
    Repeat,
    StepReplay,
    repeat_step,
    replay_step,
    trainer_loss_with_aux,
)
from nozero_trainer.pytree_npz import arrays_to_tree

# Trained weights of this model stay far below this; past it the run has diverged.
LARGE_PARAM = 1e6


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


def diagnose(
    bundle: Bundle, float64_replay: StepReplay | None, repeat: Repeat | None = None
) -> str:
    """A diagnosis a person can act on, as text.

    ``repeat`` is a bitwise comparison of two float32 re-runs made now; the bundle may
    hold another, made where the run failed.
    """
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
    lines.extend(_repeat_verdict(halt, repeat))
    lines.extend(_precision_verdict(float64_replay, bool(bad_inputs), halt))
    return "\n".join(lines) + "\n"


def _repeat_verdict(halt: Mapping[str, Any], now: Repeat | None) -> list[str]:
    """Does the step give the same bits twice, and does the re-run fail as the run did?"""
    lines = []
    for where, repeat in (("where it failed", halt.get("repeat")), ("here", now)):
        if repeat is None:
            continue
        if isinstance(repeat, Repeat):
            repeat = repeat.to_json()
        if repeat["identical"]:
            lines += [
                f"float32 step run twice from the same state ({where}): bitwise identical",
                f"  in all {repeat['compared']} outputs: the computation is deterministic.",
            ]
        else:
            lines += [
                f"float32 step run twice from the same state ({where}): the results DIFFER",
                f"  in {len(repeat['differing'])} of {repeat['compared']} outputs "
                f"({_limited(repeat['differing'])}):",
                "  → the computation is not deterministic: suspect the hardware or a",
                "    non-deterministic kernel; the failure may be transient, so resume from",
                "    the last checkpoint and see whether it repeats.",
            ]
    replayed = halt.get("replay", {})
    run_failed = not (math.isfinite(halt["loss"]) and math.isfinite(halt["grad_norm"]))
    replay_failed = not (
        math.isfinite(replayed.get("loss", math.nan))
        and math.isfinite(replayed.get("grad_norm", math.nan))
    )
    if replayed and run_failed and not replay_failed:
        lines += [
            "the float32 re-run of the step is finite, although the run's step was not:",
            "  → the failure did not repeat; suspect the hardware or a non-deterministic",
            "    kernel of the training step (a transient fault) rather than the data.",
        ]
    elif replayed and run_failed:
        lines.append(
            "the float32 re-run fails as the run did: the failure repeats from this state."
        )
    return lines


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
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such run directory or post-mortem bundle")
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
    repeat = repeat_step(loss, params, bundle.batch, optimizer, opt_state)
    text = diagnose(bundle, replay, repeat)
    if len(bundles) > 1:
        older = ", ".join(b.name for b in bundles[:-1])
        text += f"\nearlier halts of this run (diagnose each by its path): {older}\n"
    return text
