"""The guarded training engine: the reference trainer's loop on ``nozero.jax``'s guard.

Both entry points run the same engine (:func:`_train`): a :class:`nozero.jax.Guard`
over the step functions of :func:`_compiled`. ``train_arrays`` puts the data on the
device once and runs ``chunk_steps`` steps per dispatch in a ``lax.scan`` that gathers
its batches from row indices; ``train_on_batches`` runs one step per given batch. Every
step reports its loss and global gradient norm in the small per-step record the guard
keeps on the device; nothing else guards the steps (no conditional around the update,
no extra carry). The host reads the records at sync points (every ``sync_every`` steps
and at the end); a first non-finite step halts the run at that exact step with the
documented error, its context rebuilt by replay from the last confirmed state (batches
are a pure function of (seed, step) on the array path, kept since the last sync for
``train_on_batches``). ``on_sync``, a returned result and so a checkpoint only ever see
confirmed states; a sync also checks that the parameters are finite, so an update that
overflows from a finite loss and gradient (an absurd learning rate) halts too.

The step functions live in :func:`step_functions` and every array reaches the device
through :func:`place_state`, :func:`place_data` or :func:`place_batch`. Given a
:class:`~nozero_trainer.sharding.Placement`, they make the run data parallel: state and
constants replicated, each batch split over the mesh's ``data`` axis, so the per-step
record is global and every process reads the same one.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from nozero._extras import require

require("nozero_trainer", "train", ("jax", "optax", "numpy"))

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nozero.jax import (
    Guard,
    GuardHalt,
    GuardResult,
    StepContext,
    count_traces,
    scan_steps,
)
from nozero_trainer.config import TrainConfig
from nozero_trainer.loss import head_weighting, multilabel_focal_loss
from nozero_trainer.model import Params, apply_model, init_params, matmul_transposed_grad
from nozero_trainer.optim import make_optimizer, make_schedule
from nozero_trainer.sharding import Placement, ShardedRows, gather_to_host, replicate, split_batch

# Per-step values the engine reports (scalars only, so chunks stay cheap to fetch).
STEP_FIELDS = ("loss", "grad_norm", "focal_mean_weight", "bce", "rce")

# One reader per compile key, each summing its guards' jit cache sizes.
_compile_counts: list[Callable[[], int]] = []


def compile_count() -> int:
    """How many times a training step was compiled in this process (JAX's jit caches)."""
    return sum(read() for read in _compile_counts)


@dataclasses.dataclass(frozen=True)
class TrainState:
    """Where a run stands: ``step`` optimizer steps done, and their result."""

    step: int
    params: Params
    opt_state: Any


class Carry(NamedTuple):
    """What the compiled steps carry from one step to the next (a pytree)."""

    params: Params
    opt_state: Any


@dataclasses.dataclass
class HaltContext:
    """Everything needed to investigate a halt, taken from before the bad step."""

    step: int
    loss: float
    grad_norm: float
    params: Params  # the parameters the bad step started from
    opt_state: Any
    batch: dict[str, np.ndarray]  # the offending batch
    row_indices: np.ndarray | None  # its rows in the training arrays, when known
    learning_rate: float
    config: TrainConfig


# The loop's halt: the documented error, its context a HaltContext.
TrainingHalt = GuardHalt[HaltContext]


@dataclasses.dataclass
class TrainResult:
    """The final state and the per-step record of the run (or of this call, on resume)."""

    state: TrainState
    start_step: int
    steps: dict[str, np.ndarray]  # STEP_FIELDS -> float32 [steps run]

    @property
    def history(self) -> list[tuple[float, float]]:
        """Per-step ``(loss, grad_norm)`` as Python floats."""
        return list(zip(self.steps["loss"].tolist(), self.steps["grad_norm"].tolist(), strict=True))


def init_state(config: TrainConfig, in_dim: int, n_heads: int) -> TrainState:
    """Step 0: seeded parameters and a fresh optimizer state."""
    params = init_params(jax.random.PRNGKey(config.seed), in_dim, config.hidden_dims, n_heads)
    return TrainState(0, params, make_optimizer(config).init(params))


def place_state(state: TrainState, placement: Placement | None = None) -> Carry:
    """The state's arrays on the device (every device of ``placement``), as carried."""
    carry = Carry(state.params, state.opt_state)
    return jax.device_put(carry) if placement is None else replicate(carry, placement)


def place_data(tree: Any, placement: Placement | None = None) -> Any:
    """Arrays every step reads (head weights; unsharded: the training arrays)."""
    return jax.device_put(tree) if placement is None else replicate(tree, placement)


def place_batch(batch: Any, placement: Placement | None = None) -> Any:
    """One dispatch's batch on the device; with ``placement`` split over ``data``."""
    return jax.device_put(batch) if placement is None else split_batch(batch, placement)


def step_functions(
    key: TrainConfig,
    optimizer: optax.GradientTransformation | None = None,
    placement: Placement | None = None,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The training step, on a given batch and on rows gathered from on-device data.

    Both return ``(carry, metrics)`` for a guard. ``optimizer`` replaces the config's
    (benchmarks compare others on the same step); the carry's ``opt_state`` is its state.
    With a ``placement`` the batch is split over its ``data`` axis inside the step, and
    GSPMD reduces the gradients of the replicated parameters: loss and grad norm are
    global values.
    """
    optimizer = make_optimizer(key) if optimizer is None else optimizer

    def split(array):
        if placement is None:
            return array
        return jax.lax.with_sharding_constraint(array, placement.batch)

    def loss_fn(params, x, y, weights, mask):
        return multilabel_focal_loss(
            apply_model(params, x, matmul_transposed_grad),
            y,
            head_weights=weights,
            head_mask=mask,
            focal_gamma=key.focal_gamma,
            focal_alpha=key.focal_alpha,
            label_smoothing=key.label_smoothing,
            reverse_ce_weight=key.reverse_ce_weight,
        )

    def step(carry: Carry, batch, weights, mask):
        x, y = (split(part) for part in batch)
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            carry.params, x, y, weights, mask
        )
        # The update is applied whatever the step's values (a conditional around it made
        # XLA copy every buffer on every step): the guard checks the record at the next
        # sync and replays up to a failure instead.
        updates, opt_state = optimizer.update(grads, carry.opt_state, carry.params)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads)}
        metrics.update((k, stats[k]) for k in STEP_FIELDS[2:])
        return Carry(optax.apply_updates(carry.params, updates), opt_state), metrics

    def rows_step(carry: Carry, rows, data_x, data_y, weights, mask):
        # Rows come from ``batch_rows``, always in range: no out-of-range fill (its
        # select kept the shipped step ~9% slower, with the transposed weight gradient
        # of ``model.matmul_transposed_grad``).
        x = data_x.at[rows].get(mode="promise_in_bounds")
        y = data_y.at[rows].get(mode="promise_in_bounds")
        return step(carry, (x, y), weights, mask)

    return step, rows_step


class _Compiled(NamedTuple):
    on_batches: Guard  # one step per given batch
    on_arrays: Guard  # a scan of steps over rows gathered from on-device data


def _params(carry: Carry) -> Params:
    return carry.params


@functools.lru_cache(maxsize=16)
def _compiled(key: TrainConfig, placement: Placement | None = None) -> _Compiled:
    """Guarded step functions for one compile key; cached so every run reuses them."""
    step, rows_step = step_functions(key, placement=placement)
    compiled = _Compiled(
        on_batches=Guard(step, check=_params),
        on_arrays=Guard(rows_step, multi_step=scan_steps(rows_step), check=_params),
    )
    guards = (compiled.on_batches, compiled.on_arrays)
    _compile_counts.append(count_traces(*(fn for g in guards for fn in (g.single, g.multi) if fn)))
    return compiled


@functools.lru_cache(maxsize=4)
def _epoch_permutation(seed: int, epoch: int, n_rows: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n_rows).astype(np.int32)


def batch_rows(config: TrainConfig, step: int, n_rows: int) -> np.ndarray:
    """Row indices of the batch at ``step``: a pure function of (seed, step).

    Each epoch is a fresh permutation seeded by (seed, epoch); the last partial batch
    of an epoch is skipped. Resuming at any step therefore sees the same batches.
    """
    per_epoch = n_rows // config.batch_size
    epoch, position = divmod(step, per_epoch)
    start = position * config.batch_size
    return _epoch_permutation(config.seed, epoch, n_rows)[start : start + config.batch_size]


def _segments(start: int, end: int, chunk: int, sync_every: int) -> Iterator[tuple[int, int]]:
    """``(first step, length)`` pieces cut at multiples of ``chunk`` and ``sync_every``.

    Cuts sit at absolute step numbers, so a resumed run dispatches the same pieces.
    """
    step = start
    while step < end:
        stop = min(end, (step // chunk + 1) * chunk, (step // sync_every + 1) * sync_every)
        yield step, stop - step
        step = stop


def _head_setup(n_heads: int, weights: Any, mask: Any) -> tuple[jax.Array, jax.Array]:
    weights = np.ones(n_heads, np.float32) if weights is None else weights
    mask = np.ones(n_heads, np.float32) if mask is None else mask
    return jnp.asarray(weights, jnp.float32), jnp.asarray(mask, jnp.float32)


def _train(
    guard: Guard,
    config: TrainConfig,
    state: TrainState,
    batches: Iterable[Any],
    operands: tuple[Any, ...],
    context: Callable[[StepContext], HaltContext],
    on_sync: Callable[[TrainState], None] | None,
    on_history: Callable[[int, dict[str, np.ndarray]], None] | None,
    guard_on: bool,
    placement: Placement | None = None,
) -> TrainResult:
    """The engine both entry points share: run ``guard`` and report in the loop's types."""

    def confirmed(step: int, carry: Carry) -> None:
        if on_sync is not None:
            on_sync(TrainState(step, carry.params, carry.opt_state))

    result: GuardResult = guard.run(
        place_state(state, placement),
        batches,
        start_step=state.step,
        operands=operands,
        on_sync=confirmed,
        on_record=on_history,
        sync_every=config.sync_every,
        enforce=guard_on,
        context=context,
    )
    carry = result.state
    return TrainResult(
        TrainState(result.step, carry.params, carry.opt_state),
        result.start_step,
        result.records or _no_steps(),
    )


def _no_steps() -> dict[str, np.ndarray]:
    return {k: np.zeros(0, np.float32) for k in STEP_FIELDS}


def _halt_context(
    config: TrainConfig,
    halted: StepContext,
    batch: dict[str, np.ndarray],
    rows: np.ndarray | None,
    on_host: bool = False,
) -> HaltContext:
    """``on_host``: the state as host copies (sharded: the same on every process)."""
    before: Carry = jax.device_get(halted.state) if on_host else halted.state
    return HaltContext(
        step=halted.step,
        loss=halted.loss,
        grad_norm=halted.grad_norm,
        params=before.params,
        opt_state=before.opt_state,
        batch=batch,
        row_indices=rows,
        learning_rate=float(make_schedule(config)(halted.step)),
        config=config,
    )


def train_arrays(
    config: TrainConfig,
    cls: np.ndarray,
    labels: np.ndarray,
    *,
    head_weights: np.ndarray | None = None,
    head_mask: np.ndarray | None = None,
    state: TrainState | None = None,
    on_sync: Callable[[TrainState], None] | None = None,
    on_history: Callable[[int, dict[str, np.ndarray]], None] | None = None,
    guard: bool = True,
    placement: Placement | None = None,
    row_counts: list[int] | None = None,
) -> TrainResult:
    """Train on in-memory arrays (the fast path) from ``state`` (default: step 0).

    The data goes to the device once; each dispatch runs ``chunk_steps`` steps in a
    ``lax.scan`` that gathers its batches on the device from host-computed row indices.
    ``on_history(first_step, values)`` receives the per-step values at each sync.

    With a ``placement`` the run is data parallel over its mesh: ``cls`` and ``labels``
    are this process's share of the rows, ``row_counts`` every process's row count
    (default: this process holds every row), and ``batch_size`` is the global batch.
    """
    sharded = None
    if placement is not None:
        sharded = ShardedRows(cls, labels, placement, row_counts or [len(cls)])
    n_rows = len(cls) if sharded is None else sharded.n_rows
    in_dim, n_heads = cls.shape[1], labels.shape[1]
    if not 0 < config.batch_size <= n_rows:
        raise ValueError(f"batch_size ({config.batch_size}) must be in [1, {n_rows}] rows")
    state = init_state(config, in_dim, n_heads) if state is None else state
    heads = _head_setup(n_heads, head_weights, head_mask)
    if sharded is None:
        operands = place_data((cls, labels, *heads))
    else:
        operands = (sharded.data_x, sharded.data_y, *place_data(heads, placement))

    def chunks() -> Iterator[Any]:
        for first, length in _segments(
            state.step, config.steps, config.chunk_steps, config.sync_every
        ):
            rows = np.stack([batch_rows(config, s, n_rows) for s in range(first, first + length)])
            yield place_batch(rows) if sharded is None else sharded.indices(rows)

    def context(halted: StepContext) -> HaltContext:
        rows = batch_rows(config, halted.step, n_rows)
        if sharded is None:
            batch = {"cls": np.asarray(cls[rows]), "labels": np.asarray(labels[rows])}
        else:  # gathered from every process's rows; host copies, the same everywhere
            x, y = sharded.host_batch(rows)
            batch = {"cls": x, "labels": y}
        return _halt_context(config, halted, batch, rows, on_host=sharded is not None)

    engine = _compiled(config.compile_key(), placement).on_arrays
    return _train(
        engine, config, state, chunks(), operands, context, on_sync, on_history, guard, placement
    )


def _check_batch(step: int, batch: Mapping[str, Any], in_dim: int, n_heads: int):
    try:
        x = np.asarray(batch["cls"], dtype=np.float32)
        y = np.asarray(batch["labels"], dtype=np.float32)
    except KeyError as err:
        raise ValueError(f"batch at step {step} lacks field {err.args[0]!r}") from err
    if x.ndim != 2 or x.shape[1] != in_dim:
        raise ValueError(f"batch at step {step}: 'cls' has shape {x.shape}, expected [B, {in_dim}]")
    if y.shape != (x.shape[0], n_heads):
        raise ValueError(
            f"batch at step {step}: 'labels' has shape {y.shape}, expected [{x.shape[0]}, "
            f"{n_heads}]"
        )
    return x, y


def train_on_batches(
    config: TrainConfig,
    batches: Iterable[Mapping[str, Any]],
    *,
    in_dim: int,
    n_heads: int,
    class_counts: np.ndarray | None = None,
    n_rows: int | None = None,
    state: TrainState | None = None,
    on_sync: Callable[[TrainState], None] | None = None,
    on_history: Callable[[int, dict[str, np.ndarray]], None] | None = None,
    guard: bool = True,
    placement: Placement | None = None,
) -> TrainResult:
    """One optimizer step per batch ``{"cls": [B, D], "labels": [B, H]}``, in order.

    Starts from a fresh initialisation (or ``state``). ``class_counts`` (positives per
    head over ``n_rows`` rows) turns on class-balanced weights when the config asks for
    them; without counts every head weighs 1. Each step is its own dispatch, but the
    guard is still only read at sync points.
    """
    state = init_state(config, in_dim, n_heads) if state is None else state
    weights, mask = head_weighting(
        config.class_weighting, class_counts, n_rows, n_heads, config.mask_zero_positive_heads
    )
    operands = place_data(_head_setup(n_heads, weights, mask), placement)

    def checked() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for step, batch in enumerate(batches, start=state.step):
            yield place_batch(_check_batch(step, batch, in_dim, n_heads), placement)

    def context(halted: StepContext) -> HaltContext:
        x, y = gather_to_host(halted.batch)
        batch = {"cls": x, "labels": y}
        return _halt_context(config, halted, batch, None, on_host=placement is not None)

    engine = _compiled(config.compile_key(), placement).on_batches
    return _train(
        engine, config, state, checked(), operands, context, on_sync, on_history, guard, placement
    )
