"""The exact-step guard for any JAX loop: no host sync per step, the exact step on a halt.

Each dispatch (one step, or k steps of a multi-step function) returns, beside the new
state, a small per-step record (:mod:`nozero.jax.record`) that stays on the device. At
sync points (every ``sync_every`` steps and at the end) the host fetches the records
since the last sync in one transfer and checks every step. The copy starts at the sync
point and is read once the next dispatch is enqueued, so the device never waits for
the host (``on_sync`` comes a dispatch later, with the same state). A clean sync
confirms its state: only confirmed states reach ``on_sync`` (and so checkpoints) and the
result. A first non-finite step k discards everything computed since the last
confirmed state, rebuilds the state from before step k by replaying the steps from it
(the batches since that sync are kept, as references), and raises :class:`GuardHalt`.

The replay checks each step on its way, its update included: an update that overflows
although its loss and gradient were finite (an absurd learning rate) halts at its own
step, found when a later loss or the sync's check of the state is non-finite. A
``record_nonfinite`` transformation in the optimizer is read at each sync as well: one
that flagged since the confirmed state makes the replay find the step whose update it
flagged (so its own count, optimizer steps under ``optax.MultiSteps``, needs no
mapping onto the guard's steps). A
checkify, ``eqx.error_if`` or ``jax.debug.callback`` failure is located the same way:
the replay finds the step that raises. Such a failure carries no values; given an
``unchecked`` step (the same step without its own runtime checks), the guard runs it once
on the halted step to report that step's real loss and gradient norm.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from nozero import contract
from nozero.jax.convert import converts
from nozero.jax.halt import GuardHalt, StepContext
from nozero.jax.optax_record import NONE_YET, find_records
from nozero.jax.record import (
    GRAD_NORM,
    LOSS,
    all_finite,
    columns,
    first_bad,
    record_fields,
    step_record,
)

StepFn = Callable[..., tuple[Any, Mapping[str, Any]]]


@dataclasses.dataclass
class GuardResult:
    """The last confirmed state, its step and every step's record from this run."""

    state: Any
    step: int
    start_step: int
    records: dict[str, np.ndarray]  # field -> float32 [steps run]


@dataclasses.dataclass
class _Dispatch:
    first: int  # the first step it ran
    steps: int
    batch: Any
    multi: bool


class Guard:
    """Wrap a step ``(state, batch, *operands) -> (state, metrics)`` (and/or a multi-step).

    ``metrics`` holds ``loss`` and ``grad_norm`` or ``grads``, plus any scalars to record.
    ``multi_step`` runs k steps per call on a batch whose leaves lead with a step axis (a
    ``lax.scan``, e.g. :func:`scan_steps`), its metrics one value per step. ``step``
    replays single steps after a halt; without it the multi-step function replays them on
    one-step slices (one more compilation, on a halt only). ``check`` picks the part of
    the state whose finiteness a sync checks (default: all of it). ``context`` turns the
    halted :class:`StepContext` into the context the error carries. ``unchecked`` is the
    single step without its own raising checks (``eqx.error_if``, a raising callback):
    run once on a step that raised (one more compilation, on such a halt only), it gives
    the error that step's loss and gradient norm instead of ``nan``.
    """

    def __init__(
        self,
        step: StepFn | None = None,
        *,
        multi_step: StepFn | None = None,
        sync_every: int = 100,
        check: Callable[[Any], Any] | None = None,
        context: Callable[[StepContext], Any] | None = None,
        unchecked: StepFn | None = None,
    ) -> None:
        if step is None and multi_step is None:
            raise TypeError("Guard needs a step function, a multi_step function or both")
        if sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {sync_every}")
        self.sync_every = sync_every
        self.fields: tuple[str, ...] | None = None
        self._pick = check if check is not None else _whole
        self._context = context
        self.single = None if step is None else jax.jit(self._guarded(step, multi=False))
        self.multi = None if multi_step is None else jax.jit(self._guarded(multi_step, multi=True))
        self.unchecked = None if unchecked is None else jax.jit(self._guarded(unchecked, False))
        self._state_finite = jax.jit(lambda state: all_finite(self._pick(state)))

    def _record(self, metrics: Mapping[str, Any], steps: int | None) -> jax.Array:
        """The step record of ``metrics``; every step function must report the same fields."""
        fields = record_fields(metrics)
        if self.fields is not None and fields != self.fields:
            raise ValueError(
                f"the step functions report different metrics: {self.fields} and {fields}"
            )
        self.fields = fields
        return step_record(metrics, fields, steps)

    def _guarded(self, fn: StepFn, multi: bool) -> Callable[..., Any]:
        def single(state, batch, *operands):
            state, metrics = fn(state, batch, *operands)
            return state, self._record(metrics, None)

        def scanned(state, batches, *operands):
            # Each step's record is built inside the scan (one small vector per step),
            # not from the stacked metrics after it: fewer kernels and copies.
            def body(carry, batch):
                return single(carry, batch, *operands)

            state, record = jax.lax.scan(body, state, batches)
            return state, record, all_finite(self._pick(state))

        def multi_step(state, batches, *operands):
            state, metrics = fn(state, batches, *operands)
            record = self._record(metrics, np.shape(metrics[LOSS])[0])
            return state, record, all_finite(self._pick(state))

        # The state check rides in the multi-step's own output: one pass over the state
        # at the end of the dispatch, not a dispatch of its own at the sync.
        if not multi:
            return single
        if isinstance(fn, ScannedStep):
            fn = fn.step
            return scanned
        return multi_step

    def run(
        self,
        state: Any,
        batches: Iterable[Any],
        *,
        start_step: int = 0,
        operands: tuple[Any, ...] = (),
        on_sync: Callable[[int, Any], None] | None = None,
        on_record: Callable[[int, dict[str, np.ndarray]], None] | None = None,
        sync_every: int | None = None,
        context: Callable[[StepContext], Any] | None = None,
        enforce: bool = True,
    ) -> GuardResult:
        """Run one dispatch per item of ``batches`` from ``state`` at ``start_step``.

        With ``multi_step`` each item is a stacked batch of k steps; else one step's
        batch. ``operands`` are passed unchanged to every call (data kept on the device,
        constants). ``on_sync(step, state)`` gets each confirmed state;
        ``on_record(first_step, columns)`` each sync's records, up to and including a
        halted step. ``sync_every`` and ``context`` override the guard's own for this
        run; ``enforce=False`` records without halting (a control run).
        """
        every = self.sync_every if sync_every is None else sync_every
        if every < 1:
            raise ValueError(f"sync_every must be >= 1, got {every}")
        run = _Run(
            self,
            state,
            start_step,
            operands,
            on_sync,
            on_record,
            every,
            context or self._context,
            enforce,
        )
        for batch in batches:
            run.dispatch(batch)
        run.sync()
        return GuardResult(run.confirmed, run.synced, start_step, run.records())


def _whole(state: Any) -> Any:
    return state


class _Run:
    """One run's host-side bookkeeping: pending records, the replay window, syncs, halts."""

    def __init__(
        self,
        guard: Guard,
        state: Any,
        start: int,
        operands: tuple[Any, ...],
        on_sync,
        on_record,
        sync_every: int,
        context,
        enforce: bool,
    ) -> None:
        self.guard = guard
        self.context = context
        self.sync_every = sync_every
        self.multi = guard.multi is not None
        self.state = state
        self.confirmed = state  # the last state whose every step was confirmed finite
        self.step = self.synced = start
        self.operands = operands
        self.on_sync = on_sync
        self.on_record = on_record
        self.enforce = enforce
        self.window: list[_Dispatch] = []  # dispatches since the last confirmed state
        self.pending: list[jax.Array] = []
        self.state_finite: jax.Array | None = None
        self.in_flight: _InFlight | None = None  # a sync whose values are on their way
        self.synced_or_launched = start
        self.done: list[dict[str, np.ndarray]] = []
        # ``record_nonfinite`` flags in the confirmed state (None: not read yet).
        self.confirmed_flags: list[int] | None = None

    def dispatch(self, batch: Any) -> None:
        try:
            if self.multi:
                self.state, record, self.state_finite = self.guard.multi(
                    self.state, batch, *self.operands
                )
                steps = int(record.shape[0])
            else:
                self.state, record = self.guard.single(self.state, batch, *self.operands)
                self.state_finite, steps = None, 1
        except Exception as err:
            self._locate(
                err, failed=_Dispatch(self.step, _leading(batch, self.multi), batch, self.multi)
            )
        self.window.append(_Dispatch(self.step, steps, batch, self.multi))
        self.pending.append(record)
        self.step += steps
        if self.step // self.sync_every > self.synced_or_launched // self.sync_every:
            # The previous sync's values were copied while the steps since were queued:
            # reading them now leaves those steps to keep the device busy meanwhile.
            self._settle()
            self._launch()

    def sync(self) -> None:
        """Read everything not yet checked, waiting for the device; halt or confirm."""
        self._settle()
        self._launch()
        self._settle()

    def _launch(self) -> None:
        """Start copying the pending records (and the state's checks) to the host."""
        if not self.pending:
            return
        finite: Any = True
        flags: list[Any] = []
        baseline: list[Any] = []
        if self.enforce:
            finite = self.state_finite
            if finite is None:
                finite = self.guard._state_finite(self.state)
            flags = _flags(self.state)
            if self.confirmed_flags is None:
                baseline = _flags(self.confirmed)
        payload = (self.pending, finite, flags, baseline)
        for leaf in jax.tree.leaves(payload):
            if isinstance(leaf, jax.Array):
                leaf.copy_to_host_async()
        self.in_flight = _InFlight(payload, self.state, self.step, len(self.window))
        self.synced_or_launched = self.step
        self.pending = []

    def _settle(self) -> None:
        """Check a launched sync in one transfer: halt on a bad step, else confirm its state."""
        sync, self.in_flight = self.in_flight, None
        if sync is None:
            return
        try:
            records, finite, flags, baseline = jax.device_get(sync.payload)
        except Exception as err:
            self._locate(err)
        values = columns(records, self.guard.fields)
        if self.enforce:
            if self.confirmed_flags is None:
                self.confirmed_flags = [int(f) for f in baseline]
            bad = first_bad(values)
            if bad is not None:
                self._halt(self.synced + bad, values)  # the replay sees earlier flags
            if not bool(finite) or self._newly_flagged(flags):
                # Every recorded step was finite, yet the state is not (an update
                # overflowed) or a record_nonfinite flagged an update: replaying every
                # step finds the one that did.
                self._halt(None, values)
            self.confirmed_flags = [int(f) for f in flags]
        self._record(values)
        self.synced = sync.step
        self.confirmed = sync.state
        self.window = self.window[sync.window_length :]
        if self.on_sync is not None:
            self.on_sync(self.synced, self.confirmed)

    def _newly_flagged(self, flags: list[Any]) -> bool:
        """Whether a ``record_nonfinite`` flagged an update since the confirmed state."""
        if self.confirmed_flags is None:
            self.confirmed_flags = [int(f) for f in jax.device_get(_flags(self.confirmed))]
        return any(
            int(now) != NONE_YET and before == NONE_YET
            for now, before in zip(flags, self.confirmed_flags, strict=True)
        )

    def _record(self, values: dict[str, np.ndarray]) -> None:
        self.done.append(values)
        if contract.checks_watched():  # e.g. the pytest plugin's overflow check
            for i, (loss, norm) in enumerate(zip(values[LOSS], values[GRAD_NORM], strict=True)):
                contract.report_checked(self.synced + i, float(loss), float(norm))
        if self.on_record is not None:
            self.on_record(self.synced, values)

    def records(self) -> dict[str, np.ndarray]:
        fields = self.guard.fields or ()
        return {
            k: np.concatenate([d[k] for d in self.done]) if self.done else np.zeros(0, np.float32)
            for k in fields
        }

    def _halt(self, stop: int | None, values: dict[str, np.ndarray]) -> None:
        """Raise for the first bad step: ``stop`` (``None``: the last) or an earlier update.

        The replay from the confirmed state rebuilds the state from before the step and
        checks each step's update on the way: an update that left the state non-finite
        halts at its own step (with its finite values), never one step late.
        """
        last = self.synced + len(values[LOSS]) - 1
        found, before = self._replay(last + 1 if stop is None else stop)
        if found is None:  # the step at ``stop`` (or, replayed clean, the last one)
            step = last if stop is None else stop
            if stop is None:
                before = self._replay(last, check=False)[1]
            position = step - self.synced
            loss, grad_norm = float(values[LOSS][position]), float(values[GRAD_NORM][position])
        else:
            step, before, loss, grad_norm = found.step, found.before, found.loss, found.grad_norm
            position = step - self.synced
        self._record({k: v[: position + 1] for k, v in values.items()})
        raise self._error(step, loss, grad_norm, before)

    def _error(self, step: int, loss: float, grad_norm: float, before: Any) -> GuardHalt:
        context: Any = StepContext(step, loss, grad_norm, before, self._batch_at(step))
        if self.context is not None:
            context = self.context(context)
        return GuardHalt(step, loss, grad_norm, context)

    def _steps_since_confirmed(self):
        """``(step, dispatch, position)`` for every step run since the confirmed state."""
        for dispatch in self.window:
            for i in range(dispatch.steps):
                yield dispatch.first + i, dispatch, i

    def _one_step(self, state: Any, dispatch: _Dispatch, position: int) -> tuple[Any, Any]:
        """Run one step of ``dispatch`` again (single step when there is one): state, record."""
        if not dispatch.multi:
            return self.guard.single(state, dispatch.batch, *self.operands)
        if self.guard.single is not None:
            return self.guard.single(state, _step_batch(dispatch, position), *self.operands)
        batch = jax.tree.map(lambda leaf: leaf[position : position + 1], dispatch.batch)
        state, record, _ = self.guard.multi(state, batch, *self.operands)
        return state, record[0]

    def _replay(self, stop: int | None, check: bool = True) -> tuple[_Found | None, Any]:
        """Replay from the confirmed state one step at a time, up to step ``stop``.

        With ``check``, stops at the first step that raises a converted failure, reports
        a non-finite value or leaves the checked state non-finite. Returns that step (or
        ``None``) and the state reached: from before it, or before ``stop``.
        """
        state = self.confirmed
        for step, dispatch, position in self._steps_since_confirmed():
            if stop is not None and step >= stop:
                break
            if not check:
                state = self._one_step(state, dispatch, position)[0]
                continue
            try:
                after, record = self._one_step(state, dispatch, position)
                record, finite, flags = jax.device_get(
                    (record, self.guard._state_finite(after), _flags(after))
                )
            except Exception as err:
                if not converts(err):
                    raise
                loss, grad_norm = self._unchecked_values(state, dispatch, position)
                return _Found(step, state, loss, grad_norm, err), state
            values = columns([record], self.guard.fields)
            if first_bad(values) is not None or not finite or self._newly_flagged(flags):
                loss, grad_norm = float(values[LOSS][0]), float(values[GRAD_NORM][0])
                return _Found(step, state, loss, grad_norm, None), state  # noqa: NZ201 raised by the caller
            state = after
        return None, state

    def _unchecked_values(
        self, state: Any, dispatch: _Dispatch, position: int
    ) -> tuple[float, float]:
        """A raising step's loss and gradient norm, from the guard's ``unchecked`` step."""
        if self.guard.unchecked is None:
            return math.nan, math.nan
        batch = _step_batch(dispatch, position)
        try:
            record = jax.device_get(self.guard.unchecked(state, batch, *self.operands)[1])
        except Exception as err:
            if not converts(err):
                raise
            return math.nan, math.nan  # it raises too: the values stay unknown
        values = columns([record], self.guard.fields)
        return float(values[LOSS][0]), float(values[GRAD_NORM][0])

    def _batch_at(self, step: int) -> Any:
        for at, dispatch, position in self._steps_since_confirmed():
            if at == step:
                return _step_batch(dispatch, position)
        return None

    def _locate(self, err: Exception, failed: _Dispatch | None = None) -> None:
        """Re-raise ``err``, or, for a converted failure, halt at the step that raises it."""
        if not (self.enforce and converts(err)):
            raise err
        if failed is not None:
            self.window.append(failed)
        found = self._replay(None)[0]
        if found is None:
            raise err
        raise self._error(found.step, found.loss, found.grad_norm, found.before) from (
            found.failure or err
        )


class _InFlight(NamedTuple):
    payload: Any  # (records, state finite, optax records), being copied to the host
    state: Any  # the state the sync confirms if every check passes
    step: int
    window_length: int  # dispatches up to the sync


class _Found(NamedTuple):
    step: int
    before: Any  # the state the step started from
    loss: float
    grad_norm: float
    failure: Exception | None


def _step_batch(dispatch: _Dispatch, position: int) -> Any:
    """The batch of one step of ``dispatch``."""
    if not dispatch.multi:
        return dispatch.batch
    return jax.tree.map(lambda leaf: leaf[position], dispatch.batch)


def _leading(batch: Any, multi: bool) -> int:
    return int(jax.tree.leaves(batch)[0].shape[0]) if multi else 1


def _flags(state: Any) -> list[jax.Array]:
    """The first flagged step of every ``record_nonfinite`` in ``state``."""
    return [record.first_step for record in find_records(state)]


@dataclasses.dataclass(frozen=True)
class ScannedStep:
    """``step`` run over the leading axis of its batch with ``lax.scan``: a multi-step."""

    step: StepFn

    def __call__(self, state: Any, batches: Any, *operands: Any) -> tuple[Any, Any]:
        def body(carry, batch):
            return self.step(carry, batch, *operands)

        return jax.lax.scan(body, state, batches)


def scan_steps(step: StepFn) -> ScannedStep:
    """A multi-step function running ``step`` over the leading axis of its batch (lax.scan).

    A :class:`Guard` given one builds each step's record inside the scan.
    """
    return ScannedStep(step)
