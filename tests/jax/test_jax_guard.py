"""The exact-step guard on a user's JAX loop: exact halts, one compilation, confirmed states."""

from __future__ import annotations

import copy

import jax
import jax_toy as toy
import numpy as np
import pytest

from nozero import MESSAGE_PATTERN, NonFiniteError
from nozero.contract import watching_checks
from nozero.jax import Guard, GuardHalt, count_traces, scan_steps

POISONS = [np.nan, np.inf, -np.inf, toy.HUGE_INPUT]
POSITIONS = (0, toy.STEPS // 2, toy.STEPS - 1)


def _assert_same(got, want, exact: bool = True) -> None:
    for a, b in zip(toy.leaves(got), toy.leaves(want), strict=True):
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def _halt(guard: Guard, batches, **kwargs) -> tuple[GuardHalt, list[int]]:
    synced = []

    def on_sync(step, state):
        assert all(np.isfinite(leaf).all() for leaf in toy.leaves(state))
        synced.append(step)

    with pytest.raises(GuardHalt) as caught:
        guard.run(toy.init_state(), batches, on_sync=on_sync, **kwargs)
    err = caught.value
    assert isinstance(err, NonFiniteError)
    assert MESSAGE_PATTERN.fullmatch(str(err))
    return err, synced


def _poisoned(k: int, value: float) -> list[dict]:
    batches = copy.deepcopy(toy.make_batches())
    batches[k]["x"][3, 0] = value
    return batches


def _huge_lr(k: int) -> list[dict]:
    batches = copy.deepcopy(toy.make_batches())
    batches[k]["lr"] = np.float32(toy.HUGE_LR)
    return batches


def test_single_steps_halt_exactly_for_each_poison_and_an_overflow_in_one_compilation():
    guard = Guard(toy.step, sync_every=4)
    clean = toy.make_batches()
    for k in POSITIONS:
        before_k = guard.run(toy.init_state(), clean[:k]).state
        for value in POISONS:
            err, synced = _halt(guard, _poisoned(k, value))
            assert err.step == k, (k, value)
            assert not (np.isfinite(err.loss) and np.isfinite(err.grad_norm))
            assert all(step <= k for step in synced)
            assert err.context.step == k
            assert err.context.batch["x"][3, 0] == value or np.isnan(value)
            _assert_same(err.context.state, before_k)
        # An update that overflows although its loss and gradient are finite halts at
        # its own step, the last one included (only the sync's state check sees it).
        err, synced = _halt(guard, _huge_lr(k))
        assert err.step == k
        assert np.isfinite(err.loss) and np.isfinite(err.grad_norm)
        assert all(step <= k for step in synced)
        _assert_same(err.context.state, before_k)
    assert count_traces(guard.single)() == 1


def test_a_multi_step_scan_halts_exactly_and_replays_with_the_single_step():
    guard = Guard(toy.step, multi_step=scan_steps(toy.step), sync_every=8)
    reference = Guard(toy.step, sync_every=1)
    clean = toy.make_batches()
    for k in POSITIONS:
        before_k = reference.run(toy.init_state(), clean[:k]).state
        for batches in [*(_poisoned(k, v) for v in POISONS), _huge_lr(k)]:
            err, synced = _halt(guard, toy.stack(batches, 4))
            assert err.step == k
            assert all(step <= k for step in synced)
            assert err.context.batch["x"].shape == (toy.BATCH, toy.DIM)  # that step's slice
            _assert_same(err.context.state, before_k, exact=False)
    assert (count_traces(guard.multi)(), count_traces(guard.single)()) == (1, 1)


def test_clean_runs_confirm_at_sync_points_with_one_transfer_each(monkeypatch):
    guard = Guard(toy.step, multi_step=scan_steps(toy.step), sync_every=8)
    fetches = []
    real_device_get = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda tree: fetches.append(1) or real_device_get(tree))
    synced, recorded = [], []
    # Any implicit device-to-host read (a float(loss) per step) would raise here.
    with jax.transfer_guard_device_to_host("disallow"):
        result = guard.run(
            toy.init_state(),
            toy.stack(toy.make_batches(), 4),
            on_sync=lambda step, state: synced.append(step),
            on_record=lambda first, values: recorded.append((first, len(values["loss"]))),
        )
    assert synced == [8, 12] and len(fetches) == 2
    assert recorded == [(0, 8), (8, 4)]
    assert result.step == 12 and result.records["loss"].shape == (12,)
    # The per-step norm is optax.global_norm of the step's gradients.
    state = toy.init_state()
    _, metrics = toy.step(state, toy.make_batches()[0])
    np.testing.assert_allclose(
        result.records["grad_norm"][0],
        float(jax.numpy.sqrt(sum((g**2).sum() for g in jax.tree.leaves(metrics["grads"])))),
        rtol=1e-6,
    )


def test_other_scalar_metrics_are_recorded_and_bad_metrics_are_refused():
    def with_lr(state, batch):
        state, metrics = toy.step(state, batch)
        return state, {"loss": metrics["loss"], "grad_norm": 1.0, "lr": batch["lr"]}

    result = Guard(with_lr).run(toy.init_state(), toy.make_batches(3))
    assert result.records["lr"] == pytest.approx([toy.LR] * 3)

    def no_norm(state, batch):
        return toy.step(state, batch)[0], {"loss": 0.0}

    with pytest.raises(TypeError, match="'grad_norm' or 'grads'"):
        Guard(no_norm).run(toy.init_state(), toy.make_batches(1))

    def vector_metric(state, batch):
        state, metrics = toy.step(state, batch)
        return state, {**metrics, "per_row": batch["x"][:, 0]}

    with pytest.raises(ValueError, match="'per_row' has shape"):
        Guard(vector_metric).run(toy.init_state(), toy.make_batches(1))


def test_without_enforcing_the_same_poison_runs_on_to_non_finite_parameters():
    # The control for the tests above: it is the guard's check that stops the run.
    result = Guard(toy.step).run(toy.init_state(), _poisoned(2, np.nan), enforce=False)
    assert not all(np.isfinite(leaf).all() for leaf in toy.leaves(result.state))


def test_the_halt_is_a_typed_documented_error():
    assert {"context", "postmortem"} <= set(GuardHalt.__annotations__)
    err, _ = _halt(Guard(toy.step), _poisoned(1, np.inf))
    assert isinstance(err, RuntimeError) and err.postmortem is None
    copied = copy.deepcopy(err)  # through __reduce__, as pickling does
    assert (copied.step, str(copied)) == (err.step, str(err))
    assert copied.context.step == 1


def test_each_confirmed_step_is_told_to_the_checks_watchers():
    """As ``check_finite`` does: ``pytest --nozero`` then vouches for a run returning state."""
    seen = []
    guard = Guard(toy.step, sync_every=4)
    with watching_checks(lambda *values: seen.append(values)):
        result = guard.run(toy.init_state(), toy.make_batches()[:10])
        with pytest.raises(GuardHalt):
            guard.run(toy.init_state(), _poisoned(6, np.nan))
    clean, poisoned = seen[:10], seen[10:]
    assert [step for step, _, _ in clean] == list(range(10))
    np.testing.assert_allclose([loss for _, loss, _ in clean], result.records["loss"])
    assert [step for step, _, _ in poisoned] == list(range(7))  # up to the bad step
    assert np.isnan(poisoned[-1][1])
