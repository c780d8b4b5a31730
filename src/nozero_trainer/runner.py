"""One training run end to end: load, validate, train with progress, evaluate, record.

The run directory holds

- ``metrics.jsonl``: one JSON object per line: ``train`` events per step, ``eval`` events
  (per-head PR-AUC and positive counts), ``halt``, ``restart``, ``resume`` and
  ``interrupted`` events;
- ``checkpoints/``: a verified checkpoint at every evaluation and at the end;
- ``postmortem/``: a bundle per halt;
- ``status.json``, written atomically. Only a run that completed says ``"finished"``; one
  ended by SIGTERM or SIGINT says ``"interrupted"`` (see :mod:`nozero_trainer.interrupt`).

Checkpoints are written from the loop's ``on_sync`` hook, which only ever sees states whose
every step the guard confirmed finite, so no checkpoint can hold a non-finite update.

The run is data parallel over every device JAX sees (``--batch-size`` is the global
batch). In a multi-process run every process reads its share of the training shards and
makes the same calls in the same order; process 0 alone writes the run directory, each
checkpoint once every process has confirmed its sync.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
from pathlib import Path
from typing import IO, Any

import jax
import numpy as np

from nozero import NonFiniteError
from nozero_trainer import distributed, loop
from nozero_trainer.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_config,
    read_manifest,
    roll_back,
    save_checkpoint,
)
from nozero_trainer.config import (
    Problem,
    RunOptions,
    SettingsError,
    TrainConfig,
    check_data,
    check_settings,
)
from nozero_trainer.data import Share, Split, load_dataset
from nozero_trainer.divergence import LossHistory
from nozero_trainer.evaluation import Evaluation, evaluate, predict
from nozero_trainer.interrupt import RunInterrupted, catch_signals, deferred
from nozero_trainer.loss import head_weighting
from nozero_trainer.model import apply_model
from nozero_trainer.optim import make_optimizer, make_schedule
from nozero_trainer.postmortem import (
    repeat_step,
    replay_step,
    trainer_loss_with_aux,
    write_bundle,
)
from nozero_trainer.progress import Progress
from nozero_trainer.run_config import MODEL_SETTINGS, config_differences, run_configuration
from nozero_trainer.runlog import METRICS, MetricsLog, read_metrics, write_status
from nozero_trainer.scores import write_holdout_scores
from nozero_trainer.sharding import Placement, batch_holders, check_global_batch, data_placement

log = logging.getLogger("nozero_trainer")


@dataclasses.dataclass
class RunSummary:
    out_dir: Path
    state: loop.TrainState
    evaluation: Evaluation
    masked_heads: tuple[str, ...]
    restarts: int = 0
    resumed_from: int | None = None
    holdout_scores: Path | None = None


@dataclasses.dataclass
class _Start:
    state: loop.TrainState | None
    lr_scale: float = 1.0
    restarts: int = 0


def _restore(path: Path, config: TrainConfig, run_config: dict[str, Any]) -> _Start:
    """Load a verified checkpoint into the model's structure, with its resumable state."""
    template = loop.init_state(config, run_config["in_dim"], len(config.heads))
    checkpoint = load_checkpoint(
        path,
        template.params,
        template.opt_state,
        expect={k: run_config[k] for k in MODEL_SETTINGS},
    )
    state = loop.TrainState(checkpoint.step, checkpoint.params, checkpoint.opt_state)
    return _Start(
        state,
        float(checkpoint.state.get("lr_scale", 1.0)),
        int(checkpoint.state.get("restarts", 0)),
    )


def _refuse_existing_run(out_dir: Path) -> None:
    path = latest_checkpoint(out_dir)
    name = path.name if path is not None else "?"
    raise ValueError(
        f"{out_dir}: already holds a run (checkpoint {name}); pass --resume to continue it, "
        "or choose another --out"
    )


def _resume_point(
    out_dir: Path,
    config: TrainConfig,
    run_config: dict[str, Any],
    resume: bool,
    stream: IO[str],
) -> _Start:
    """Where this run starts: a fresh step 0, or the verified latest checkpoint on resume."""
    path = latest_checkpoint(out_dir)
    if not resume:
        if path is not None:
            _refuse_existing_run(out_dir)
        return _Start(None)
    if path is None:
        print(f"resume: {out_dir} has no checkpoint yet: starting from step 0", file=stream)
        return _Start(None)
    saved = read_config(path, read_manifest(path))
    differences = config_differences(saved, run_config)
    if differences:
        raise ValueError(
            f"{out_dir}: cannot resume, the run's configuration differs from the command "
            "line: " + "; ".join(differences)
        )
    start = _restore(path, config, run_config)
    print(f"resume: continuing from checkpoint {path.name} at step {start.state.step}", file=stream)
    return start


def _write_postmortem(
    out_dir: Path,
    err: NonFiniteError,
    run_config: dict[str, Any],
    weights: np.ndarray,
    mask: np.ndarray,
    restarts: int,
    placement: Placement,
) -> Path:
    """Replay the halted step on the host and keep everything needed to investigate it."""
    context = err.context
    loss = trainer_loss_with_aux(context.config, weights, mask)
    optimizer = make_optimizer(context.config)
    replay = replay_step(
        loss, context.params, context.batch, optimizer=optimizer, opt_state=context.opt_state
    )
    # Twice more, bit for bit, on the machine that failed: does the step even repeat?
    repeat = repeat_step(loss, context.params, context.batch, optimizer, context.opt_state)
    rows = context.row_indices
    return write_bundle(
        out_dir,
        step=err.step,
        loss=err.loss,
        grad_norm=err.grad_norm,
        learning_rate=context.learning_rate,
        message=str(err),
        batch=context.batch,
        row_indices=np.full(len(context.batch["cls"]), -1) if rows is None else rows,
        params=context.params,
        opt_state=context.opt_state,
        replay=replay,
        config={**run_config, "peak_lr": context.config.peak_lr},
        heads=context.config.heads,
        restart=restarts,
        repeat=repeat,
        extra={
            "head_weights": np.asarray(weights).tolist(),
            "head_mask": np.asarray(mask).tolist(),
            "holders": _holders(context, rows, placement),
        },
    )


def _holders(context: Any, rows: np.ndarray | None, placement: Placement) -> dict[str, Any]:
    """Where the halted batch's rows were: poisoned = non-finite inputs or outputs."""
    cls = np.asarray(context.batch["cls"])
    with jax.default_device(jax.local_devices()[0]):
        outputs = np.asarray(apply_model(context.params, cls))
    poisoned = ~np.isfinite(cls).all(axis=1) | ~np.isfinite(outputs).all(axis=1)
    return batch_holders(poisoned, rows, placement)


def _on_host(params: Any) -> Any:
    """Host copies of (replicated) parameters, for host-side work on one local device."""
    return jax.device_get(params)


class _Run:
    """One run's moving parts: the loop's hooks, evaluations, checkpoints, halts, restarts."""

    def __init__(
        self,
        config: TrainConfig,
        out_dir: Path,
        holdout: Split,
        run_config: dict[str, Any],
        options: RunOptions,
        metrics: MetricsLog,
        stream: IO[str],
        placement: Placement,
    ) -> None:
        self.placement = placement
        self.writer = distributed.process_index() == 0  # the one process writing files
        self.config, self.out_dir, self.holdout = config, out_dir, holdout
        self.run_config, self.options, self.metrics, self.stream = (
            run_config,
            options,
            metrics,
            stream,
        )
        self.restarts, self.lr_scale = 0, 1.0
        self.last_eval: tuple[int, Evaluation] | None = None
        self.history = LossHistory()  # judges which checkpoints a restart may go back to
        self.confirmed_step = 0

    def write_status(self, status: dict[str, Any]) -> None:
        if self.writer:
            with deferred():
                write_status(self.out_dir, status)

    def loop_config(self) -> TrainConfig:
        """The config the loop runs: the LR scaled after restarts, syncs on evaluations."""
        config = self.config
        if self.lr_scale != 1.0:
            config = dataclasses.replace(config, peak_lr=config.peak_lr * self.lr_scale)
        if config.eval_every > 0:
            config = dataclasses.replace(
                config, sync_every=math.gcd(config.sync_every, config.eval_every)
            )
        return config

    def begin(self, start: _Start, schedule_config: TrainConfig) -> None:
        self.schedule = make_schedule(schedule_config)
        self.progress = Progress(
            self.config.steps, start.state.step if start.state else 0, self.stream
        )

    def on_history(self, first: int, values: dict[str, np.ndarray]) -> None:
        steps = np.arange(first, first + values["loss"].size)
        lrs = np.asarray(self.schedule(steps), dtype=np.float64)
        columns = {k: v.tolist() for k, v in values.items()}
        self.history.record(first, columns["loss"])
        for i, step in enumerate(steps.tolist()):
            self.metrics.write(
                {
                    "event": "train",
                    "step": step,
                    "lr": float(lrs[i]),
                    **{k: columns[k][i] for k in columns},
                }
            )
        # Progress shows finite steps only: at a halt the error, printed next, names the step.
        finite = [
            math.isfinite(a) and math.isfinite(b)
            for a, b in zip(columns["loss"], columns["grad_norm"], strict=True)
        ]
        shown = finite.index(False) if False in finite else len(finite)
        if shown:
            last = shown - 1
            self.progress.update(
                int(steps[last]) + 1,
                columns["loss"][last],
                columns["grad_norm"][last],
                float(lrs[last]),
            )

    def on_sync(self, state: loop.TrainState) -> None:
        """Evaluate and checkpoint when due; the loop calls this only after a finite sync."""
        self.confirmed_step = state.step
        eval_every = self.config.eval_every
        if state.step == self.config.steps or (eval_every > 0 and state.step % eval_every == 0):
            self.evaluate(state)
            # Every process has confirmed this sync before the one writer saves it.
            distributed.barrier("checkpoint")
            if not self.writer:
                return
            # The loop's sync already refused non-finite parameters, and save_checkpoint
            # refuses them again as the last line of defence. Pruning spares the newest
            # checkpoint that had not diverged, so a restart can still go back to it.
            arrays = _on_host((state.params, state.opt_state))
            good, _ = self.rollback_point()
            with deferred():
                save_checkpoint(
                    self.out_dir,
                    state.step,
                    *arrays,
                    self.run_config,
                    state={"lr_scale": self.lr_scale, "restarts": self.restarts},
                    also_keep=good.name if good is not None else None,
                )

    def rollback_point(self) -> tuple[Path | None, list[str]]:
        """The newest checkpoint whose loss had not diverged, and the newer ones passed over.

        How a checkpoint is judged is :mod:`nozero_trainer.divergence`'s to say.
        """
        passed = []
        for step, path in reversed(list_checkpoints(self.out_dir)):
            why = self.history.diverged(step)
            if why is None:
                return path, passed
            passed.append(f"{path.name} ({why})")
        return None, passed

    def evaluate(self, state: loop.TrainState) -> Evaluation:
        with jax.default_device(jax.local_devices()[0]):
            evaluation = evaluate(_on_host(state.params), self.holdout)
        self.last_eval = (state.step, evaluation)
        event = {
            "event": "eval",
            "step": state.step,
            "pr_auc": evaluation.pr_auc,
            "positives": evaluation.positives,
        }
        if evaluation.undefined():
            event["pr_auc_undefined"] = evaluation.undefined()
        self.metrics.write(event)
        shown = " ".join(
            f"{h}={'-' if v is None else f'{v:.3f}'}" for h, v in evaluation.pr_auc.items()
        )
        print(f"eval at step {state.step}: PR-AUC {shown}", file=self.stream, flush=True)
        return evaluation

    def halted(self, err: NonFiniteError, weights: np.ndarray, mask: np.ndarray) -> _Start:
        """Keep a post-mortem; return where to restart from, or re-raise when out of restarts."""
        try:
            bundle: Path | None = None
            if self.writer:
                bundle = _write_postmortem(
                    self.out_dir,
                    err,
                    self.run_config,
                    weights,
                    mask,
                    self.restarts,
                    self.placement,
                )
        except Exception as failure:  # the halt itself must still be reported as documented
            log.error("could not write the post-mortem bundle: %r", failure)
            bundle = None
        kept = str(bundle) if bundle is not None else None
        self.metrics.write(
            {
                "event": "halt",
                "step": err.step,
                "loss": err.loss,
                "grad_norm": err.grad_norm,
                "lr": err.context.learning_rate,
                "message": str(err),
                "postmortem": kept,
            }
        )
        if self.options.on_nonfinite != "restart" or self.restarts >= self.options.max_restarts:
            err.postmortem = bundle
            self.write_status(
                {
                    "status": "halted",
                    "step": err.step,
                    "loss": err.loss,
                    "grad_norm": err.grad_norm,
                    "message": str(err),
                    "postmortem": kept,
                    "restarts": self.restarts,
                    "config": self.run_config,
                },
            )
            distributed.barrier("halt")  # no process leaves before process 0 has written
            raise err
        self.restarts += 1
        self.lr_scale *= 0.5
        path, passed = self.rollback_point()
        if passed and self.writer:
            with deferred():
                roll_back(self.out_dir, path)
        distributed.barrier("rollback")  # every process reads the checkpoint rolled back to
        start = _Start(None) if path is None else _restore(path, self.config, self.run_config)
        begin = start.state.step if start.state is not None else 0
        self.history.forget_from(begin)
        where = path.name if path is not None else "no checkpoint from before the divergence"
        if path is None and not passed:
            where = "no checkpoint yet"
        skipped = "".join(f"!!! passed over {p}\n" for p in passed)
        print(
            f"\n!!! RESTART {self.restarts}/{self.options.max_restarts} after a non-finite "
            f"step:\n{err}\n!!! post-mortem kept at {bundle}\n{skipped}"
            f"!!! restarting from step {begin} ({where}) with the learning rate scaled by "
            f"{self.lr_scale:g}\n",
            file=self.stream,
            flush=True,
        )
        self.metrics.write(
            {
                "event": "restart",
                "step": begin,
                "restart": self.restarts,
                "lr_scale": self.lr_scale,
                "halted_step": err.step,
                "postmortem": kept,
                "passed_over": passed,
            }
        )
        return start

    def interrupted(self, signal: RunInterrupted) -> None:
        """Record a SIGTERM/SIGINT: ``status.json`` says "interrupted" and where to resume."""
        path = latest_checkpoint(self.out_dir) if self.writer else None
        checkpoint = path.name if path is not None else None
        resumable = int(read_manifest(path)["step"]) if path is not None else 0
        self.metrics.write({"event": "interrupted", "step": self.confirmed_step})
        self.write_status(
            {
                "status": "interrupted",
                "signal": signal.name,
                "step": self.confirmed_step,
                "checkpoint": checkpoint,
                "restarts": self.restarts,
                "config": self.run_config,
            }
        )
        if path is None:
            signal.summary = (
                f"at step {self.confirmed_step}, before the first checkpoint; nothing to resume"
            )
        else:
            signal.summary = (
                f"at step {self.confirmed_step}; checkpoint {checkpoint} (step {resumable}) "
                "kept, continue with --resume"
            )


def run_training(
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    stream: IO[str] | None = None,
    options: RunOptions | None = None,
) -> RunSummary:
    """Train ``config`` on ``data_dir`` into ``out_dir``; raises ``NonFiniteError`` on a halt.

    A halt leaves a post-mortem bundle (its path is on the error as ``postmortem``); with
    ``on_nonfinite="restart"`` the run instead continues from the newest checkpoint whose
    loss had not diverged (see :mod:`nozero_trainer.divergence`) with half the learning
    rate, at most ``max_restarts`` times. SIGTERM or SIGINT raises ``RunInterrupted``
    once ``status.json`` says "interrupted" (the last checkpoint is kept as it was).
    """
    with catch_signals():
        try:
            return _run_training(config, data_dir, out_dir, stream=stream, options=options)
        except RunInterrupted as signal:
            if not hasattr(signal, "summary"):  # still loading and checking: nothing written
                signal.summary = "before training started; the run directory is as it was"
            raise


def _run_training(
    config: TrainConfig,
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    stream: IO[str] | None,
    options: RunOptions | None,
) -> RunSummary:
    options = options or RunOptions()
    stream = stream or sys.stderr  # looked up per call: the process may have replaced it
    out_dir = Path(out_dir)
    # Every setting is checked before the data is read, and nothing is created until the
    # data has been checked too: a refused run leaves no trace.
    problems = check_settings(config) + options.problems()
    if problems:
        raise SettingsError(problems)
    joined = distributed.initialize(
        distributed.settings_from(options.coordinator, options.num_processes, options.process_id)
    )
    placement = data_placement()
    try:
        check_global_batch(config.batch_size, placement)
    except ValueError as err:
        raise SettingsError([Problem("batch_size", str(err))]) from None
    if not options.resume and latest_checkpoint(out_dir) is not None:
        _refuse_existing_run(out_dir)
    share = Share(jax.process_index(), jax.process_count()) if joined else None
    train, holdout = load_dataset(data_dir, config.heads, share)
    label_counts = train.global_label_counts()
    masked, problems = check_data(config, train.global_rows, label_counts.tolist())
    if problems:
        raise SettingsError(problems)
    if masked:
        log.warning(
            "WARNING: heads with zero training positives are MASKED OUT of the loss: %s",
            ", ".join(masked),
        )
    weights, mask = head_weighting(
        config.class_weighting,
        label_counts,
        train.global_rows,
        len(config.heads),
        config.mask_zero_positive_heads,
    )
    run_config = run_configuration(config.to_dict(), data_dir, train, holdout)
    start = _resume_point(out_dir, config, run_config, options.resume, stream)
    resumed_from = start.state.step if start.state is not None else None

    writer = distributed.process_index() == 0
    if writer:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_status(out_dir, {"status": "running", "config": run_config})
    log_path = out_dir / METRICS if writer else Path(os.devnull)
    with MetricsLog(log_path, append=writer and resumed_from is not None) as metrics:
        run = _Run(config, out_dir, holdout, run_config, options, metrics, stream, placement)
        run.restarts, run.lr_scale = start.restarts, start.lr_scale
        if resumed_from is not None:
            run.history.replay(read_metrics(log_path) if writer else [])
            run.confirmed_step = resumed_from
            metrics.write({"event": "resume", "step": resumed_from})
        try:
            return _train_and_finish(run, start, train, holdout, weights, mask, masked)
        except RunInterrupted as signal:
            # No barrier: a process the signal did not reach would never arrive at it.
            run.interrupted(signal)
            raise


def _train_and_finish(
    run: _Run,
    start: _Start,
    train: Split,
    holdout: Split,
    weights: np.ndarray,
    mask: np.ndarray,
    masked: tuple[str, ...],
) -> RunSummary:
    """Train (restarting as the options allow), evaluate at the end, write "finished"."""
    resumed_from = start.state.step if start.state is not None else None
    while True:
        loop_config = run.loop_config()
        run.begin(start, loop_config)
        try:
            result = loop.train_arrays(
                loop_config,
                train.cls,
                train.labels,
                head_weights=weights,
                head_mask=mask,
                state=start.state,
                on_sync=run.on_sync,
                on_history=run.on_history,
                placement=run.placement,
                row_counts=train.row_counts,
            )
            break
        except NonFiniteError as err:
            start = run.halted(err, weights, mask)
    state = result.state
    if run.last_eval is None or run.last_eval[0] != state.step:
        run.evaluate(state)  # resumed at the very end: nothing left to train, still report
    evaluation = run.last_eval[1]

    scores_path = None
    if run.options.holdout_scores_out is not None and run.writer:
        with jax.default_device(jax.local_devices()[0]):
            scores = predict(_on_host(state.params), holdout.cls)
        with deferred():
            scores_path = write_holdout_scores(run.options.holdout_scores_out, holdout, scores)
    finished = {
        "status": "finished",
        "step": state.step,
        "config": run.run_config,
        "pr_auc": evaluation.pr_auc,
        "masked_heads": list(masked),
        "restarts": run.restarts,
        "lr_scale": run.lr_scale,
    }
    if evaluation.undefined():
        finished["pr_auc_undefined"] = evaluation.undefined()
    run.write_status(finished)
    distributed.barrier("finished")  # no process leaves before process 0 has written
    return RunSummary(
        run.out_dir, state, evaluation, masked, run.restarts, resumed_from, scores_path
    )
