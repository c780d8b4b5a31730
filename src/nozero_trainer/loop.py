"""The guarded training engine: many steps per dispatch, one host check per sync.

Every step reports its loss and global gradient norm in the small per-step output the
engine returns anyway; nothing else guards the steps on the device (no conditional
around the update, no extra carry), so the guard costs almost nothing per step. The
host fetches those outputs only at sync points (every ``sync_every`` steps and at the
end) and checks every step in them. A clean sync confirms its state, which becomes the
run's last confirmed state (a reference: JAX arrays are immutable). A first non-finite
step k discards everything computed since, rebuilds the exact state from before step k
by replaying the steps from the last confirmed state (batches are a pure function of
(seed, step) on the array path, and kept since the last sync for ``train_on_batches``),
and raises the documented ``NonFiniteError`` with that state in its context.
``on_sync``, a returned result and so a checkpoint only ever see confirmed states.

An update can overflow although its step's loss and gradient were finite (an absurd
learning rate). The next step's loss is then non-finite and halts the run there; if
the overflow was the last step before a sync, the sync's check of the parameters halts
at that step instead (the error then shows its finite values). Either way no hook and
no caller ever receives non-finite parameters from a run that did not halt.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nozero import NonFiniteError
from nozero_trainer.config import TrainConfig
from nozero_trainer.loss import head_weighting, multilabel_focal_loss
from nozero_trainer.model import Params, apply_model, init_params, matmul_transposed_grad
from nozero_trainer.optim import make_optimizer, make_schedule
from nozero_trainer.sharding import Placement, ShardedRows, replicate

# Per-step values the engine reports (scalars only, so chunks stay cheap to fetch).
STEP_FIELDS = ("loss", "grad_norm", "focal_mean_weight", "bce", "rce")

_traces = 0


def compile_count() -> int:
    """How many times a training function was traced (= compiled) in this process."""
    return _traces


def _count_trace() -> None:
    # Runs only while JAX traces, never on a cached call: counts compilations.
    global _traces
    _traces += 1


def _first_bad(values: Mapping[str, np.ndarray]) -> int | None:
    """Position of the first step in ``values`` whose loss or gradient norm is non-finite."""
    finite = np.isfinite(values["loss"]) & np.isfinite(values["grad_norm"])
    return None if finite.all() else int(np.argmin(finite))


@dataclasses.dataclass(frozen=True)
class TrainState:
    """Where a run stands: ``step`` optimizer steps done, and their result."""

    step: int
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


@dataclasses.dataclass
class TrainResult:
    """The final state and the per-step record of the run (or of this call, on resume)."""

    state: TrainState
    start_step: int
    steps: dict[str, np.ndarray]  # STEP_FIELDS -> float32 [steps run]

    @property
    def history(self) -> list[tuple[float, float]]:
        """Per-step ``(loss, grad_norm)`` as Python floats."""
        return list(zip(self.steps["loss"].tolist(), self.steps["grad_norm"].tolist(),
                        strict=True))


def init_state(config: TrainConfig, in_dim: int, n_heads: int) -> TrainState:
    """Step 0: seeded parameters and a fresh optimizer state."""
    params = init_params(jax.random.PRNGKey(config.seed), in_dim, config.hidden_dims, n_heads)
    return TrainState(0, params, make_optimizer(config).init(params))


def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


_check_params = jax.jit(_all_finite)  # for syncs outside a chunk (``train_on_batches``)


class _Compiled(NamedTuple):
    single: Callable[..., Any]  # one step per call
    chunk: Callable[..., Any]  # a scan of steps over rows gathered from on-device data


@functools.lru_cache(maxsize=16)
def _compiled(key: TrainConfig, placement: Placement | None = None) -> _Compiled:
    """Jitted step functions for one compile key; cached so every run reuses them.

    With a ``placement`` each batch is split over its ``data`` axis (parameters are
    replicated), so GSPMD reduces the gradients: loss and grad norm are global values.
    """
    optimizer = make_optimizer(key)

    def split(batch):
        if placement is None:
            return batch
        return jax.lax.with_sharding_constraint(batch, placement.batch)

    def loss_fn(params, x, y, weights, mask):
        return multilabel_focal_loss(
            apply_model(params, x, matmul_transposed_grad), y, head_weights=weights,
            head_mask=mask, focal_gamma=key.focal_gamma, focal_alpha=key.focal_alpha,
            label_smoothing=key.label_smoothing, reverse_ce_weight=key.reverse_ce_weight,
        )

    def update(grads, params, opt_state):
        updates, new_opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_opt_state

    def step(carry, x, y, weights, mask):
        params, opt_state = carry
        x, y = split(x), split(y)
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, x, y, weights, mask
        )
        grad_norm = optax.tree.norm(grads)
        # The update is applied whatever the step's values (a conditional around it made
        # XLA copy every buffer on every step): the host checks the outputs at the next
        # sync, and discards the steps after a failure by replaying up to it instead.
        params, opt_state = update(grads, params, opt_state)
        # One small vector per step (not one output per field): fewer kernels per step.
        out = jnp.stack([loss, grad_norm, *(stats[k] for k in STEP_FIELDS[2:])])
        return (params, opt_state), out

    def single(carry, x, y, weights, mask):
        _count_trace()
        return step(carry, x, y, weights, mask)

    def chunk(carry, data_x, data_y, indices, weights, mask):
        _count_trace()

        def body(inner, rows):
            # Rows come from ``batch_rows``, always in range: no out-of-range fill (its
            # select kept the shipped step ~9% slower, with the transposed weight
            # gradient of ``model.matmul_transposed_grad``).
            x = data_x.at[rows].get(mode="promise_in_bounds")
            y = data_y.at[rows].get(mode="promise_in_bounds")
            return step(inner, x, y, weights, mask)

        carry, outputs = jax.lax.scan(body, carry, indices)
        # Whether the chunk's last update left finite parameters, for the guard at a
        # sync: computed here, it costs one pass over the parameters, not a dispatch.
        return carry, outputs, _all_finite(carry[0])

    return _Compiled(jax.jit(single), jax.jit(chunk))


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


def _is_sync(step: int, end: int, sync_every: int) -> bool:
    return step == end or step % sync_every == 0


def _columns(outputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per-step outputs (``[steps, fields]`` or ``[fields]`` arrays) as one column per field."""
    host = np.concatenate([o.reshape(-1, len(STEP_FIELDS)) for o in outputs]).astype(np.float32)
    return {k: host[:, i] for i, k in enumerate(STEP_FIELDS)}


# Rebuilds the state at a step (second argument) from an earlier confirmed state by
# running the same steps again with the already compiled single-step function.
Replay = Callable[[TrainState, int], TrainState]
# Describes a halt at a step, given the rebuilt state from before it.
Context = Callable[[int, float, float, TrainState], HaltContext]


def _head_setup(n_heads: int, weights: Any, mask: Any) -> tuple[jax.Array, jax.Array]:
    weights = np.ones(n_heads, np.float32) if weights is None else weights
    mask = np.ones(n_heads, np.float32) if mask is None else mask
    return jnp.asarray(weights, jnp.float32), jnp.asarray(mask, jnp.float32)


class _Sync:
    """Host-side bookkeeping shared by both entry points: outputs, hooks, halts."""

    def __init__(self, start: TrainState, on_sync, on_history, guard: bool,
                 replay: Replay, context: Context) -> None:
        self.start = start.step
        self.confirmed = start  # the last state whose every step was confirmed finite
        self.guard = guard
        self.replay = replay
        self.context = context
        self.pending: list[jax.Array] = []
        self.done: list[dict[str, np.ndarray]] = []
        self.on_sync = on_sync
        self.on_history = on_history
        self.synced = start.step

    def sync(self, carry, step: int, params_finite: jax.Array | None = None) -> TrainState:
        """Read the guard; raise on a bad step, else report the steps and call the hooks.

        ``params_finite`` is the chunk's own check of the parameters it returned; without
        it the check is dispatched here.
        """
        params, opt_state = carry
        if not self.guard:
            params_finite = True
        elif params_finite is None:
            params_finite = _check_params(params)
        # One host round trip for all a sync reads.
        outputs, params_finite = jax.device_get((self.pending, params_finite))
        fetched = _columns(outputs) if outputs else None
        self.pending = []
        if self.guard and fetched is not None:
            i = _first_bad(fetched)
            if i is not None:  # report the steps up to and including the bad one
                self._record({k: v[: i + 1] for k, v in fetched.items()})
                self._halt(self.synced + i, float(fetched["loss"][i]),
                           float(fetched["grad_norm"][i]))
        if fetched is not None:
            self._record(fetched)
        if not params_finite:
            # Every loss and gradient was finite, yet the parameters are not: the last
            # step's update overflowed (an earlier one would have made a later loss
            # non-finite). Halt there rather than hand the parameters to a hook.
            self._halt(step - 1, float(fetched["loss"][-1]), float(fetched["grad_norm"][-1]))
        self.synced = step
        self.confirmed = TrainState(step, params, opt_state)
        if self.on_sync is not None:
            self.on_sync(self.confirmed)
        return self.confirmed

    def _halt(self, step: int, loss: float, grad_norm: float) -> None:
        """Raise for ``step``, with the state from before it rebuilt from the confirmed one."""
        err = NonFiniteError(step, loss, grad_norm)
        err.context = self.context(step, loss, grad_norm, self.replay(self.confirmed, step))
        raise err

    def _record(self, values: dict[str, np.ndarray]) -> None:
        self.done.append(values)
        if self.on_history is not None:
            self.on_history(self.synced, values)

    def steps(self) -> dict[str, np.ndarray]:
        if not self.done:
            return {k: np.zeros(0, np.float32) for k in STEP_FIELDS}
        return {k: np.concatenate([d[k] for d in self.done]) for k in STEP_FIELDS}


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
    are this process's share of the rows and ``row_counts`` every process's row count
    (default: this process holds every row); ``batch_size`` is the global batch.
    """
    sharded = None if placement is None else ShardedRows(
        cls, labels, placement, row_counts or [len(cls)])
    n_rows = len(cls) if sharded is None else sharded.n_rows
    in_dim, n_heads = cls.shape[1], labels.shape[1]
    if not 0 < config.batch_size <= n_rows:
        raise ValueError(f"batch_size ({config.batch_size}) must be in [1, {n_rows}] rows")
    state = init_state(config, in_dim, n_heads) if state is None else state
    compiled = _compiled(config.compile_key(), placement)
    weights, mask = _head_setup(n_heads, head_weights, head_mask)
    if sharded is None:
        data_x, data_y = jax.device_put(cls), jax.device_put(labels)
    else:
        data_x, data_y = sharded.data_x, sharded.data_y
        weights, mask = replicate((weights, mask), placement)
        state = TrainState(state.step, *replicate((state.params, state.opt_state), placement))
    carry = (state.params, state.opt_state)
    schedule = make_schedule(config)

    def batch(step: int, on_host: bool = True) -> tuple[Any, Any]:
        rows = batch_rows(config, step, n_rows)
        if sharded is not None:
            return sharded.host_batch(rows) if on_host else sharded.device_batch(rows)
        return np.asarray(cls[rows]), np.asarray(labels[rows])

    def replay(start: TrainState, stop: int) -> TrainState:
        return _replay(compiled.single, start, stop, functools.partial(batch, on_host=False),
                       weights, mask)

    def context(step: int, loss: float, grad_norm: float, before: TrainState) -> HaltContext:
        x, y = batch(step)
        if sharded is not None:  # host copies: the same on every process
            before = TrainState(before.step, *jax.device_get((before.params, before.opt_state)))
        return HaltContext(
            step=step, loss=loss, grad_norm=grad_norm,
            params=before.params, opt_state=before.opt_state, batch={"cls": x, "labels": y},
            row_indices=batch_rows(config, step, n_rows),
            learning_rate=float(schedule(step)), config=config,
        )

    tracker = _Sync(state, on_sync, on_history, guard, replay, context)

    for first, length in _segments(state.step, config.steps, config.chunk_steps,
                                   config.sync_every):
        indices = np.stack([batch_rows(config, s, n_rows) for s in range(first, first + length)])
        if sharded is not None:
            indices = sharded.indices(indices)
        carry, outputs, params_finite = compiled.chunk(carry, data_x, data_y, indices,
                                                       weights, mask)
        tracker.pending.append(outputs)
        end = first + length
        if _is_sync(end, config.steps, config.sync_every):
            state = tracker.sync(carry, end, params_finite)
    return TrainResult(state, tracker.start, tracker.steps())


def _replay(single: Callable[..., Any], start: TrainState, stop: int,
            batch: Callable[[int], tuple[np.ndarray, np.ndarray]], weights: jax.Array,
            mask: jax.Array) -> TrainState:
    """Run steps ``start.step .. stop - 1`` again, one compiled step per dispatch."""
    carry = (start.params, start.opt_state)
    for step in range(start.step, stop):
        carry, _ = single(carry, *batch(step), weights, mask)
    return TrainState(stop, carry[0], carry[1])


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
) -> TrainResult:
    """One optimizer step per batch ``{"cls": [B, D], "labels": [B, H]}``, in order.

    Starts from a fresh initialisation (or ``state``). ``class_counts`` (positives per
    head over ``n_rows`` rows) turns on class-balanced weights when the config asks for
    them; without counts every head weighs 1. Each step is its own dispatch, but the
    guard is still only read at sync points.
    """
    state = init_state(config, in_dim, n_heads) if state is None else state
    compiled = _compiled(config.compile_key())
    weights, mask = head_weighting(config.class_weighting, class_counts, n_rows, n_heads,
                                   config.mask_zero_positive_heads)
    weights, mask = _head_setup(n_heads, weights, mask)
    carry = (state.params, state.opt_state)
    schedule = make_schedule(config)
    window: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # the batches since the last sync

    def replay(start: TrainState, stop: int) -> TrainState:
        return _replay(compiled.single, start, stop, window.__getitem__, weights, mask)

    def context(step: int, loss: float, grad_norm: float, before: TrainState) -> HaltContext:
        x, y = window[step]
        return HaltContext(
            step=step, loss=loss, grad_norm=grad_norm,
            params=before.params, opt_state=before.opt_state, batch={"cls": x, "labels": y},
            row_indices=None, learning_rate=float(schedule(step)), config=config,
        )

    tracker = _Sync(state, on_sync, on_history, guard, replay, context)

    step = state.step
    for batch in batches:
        x, y = _check_batch(step, batch, in_dim, n_heads)
        window[step] = (x, y)
        carry, out = compiled.single(carry, x, y, weights, mask)
        tracker.pending.append(out)
        step += 1
        if step % config.sync_every == 0:
            state = tracker.sync(carry, step)
            window.clear()
    if step != tracker.synced:
        state = tracker.sync(carry, step)
    return TrainResult(state, tracker.start, tracker.steps())
