"""record_nonfinite: updates pass through bit for bit; the first bad step is kept for the guard."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax_toy as toy
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nozero.jax import Guard, GuardHalt, find_records, record_nonfinite

# Every float32 value (NaNs, infinities, -0.0, subnormals); fixed shapes, one compilation.
ELEMENTS = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)

_update = jax.jit(record_nonfinite().update)


@settings(max_examples=40, deadline=None)
@given(
    w=hnp.arrays(np.float32, (3, 4), elements=ELEMENTS),
    b=hnp.arrays(np.float32, (4,), elements=ELEMENTS),
)
def test_updates_pass_through_bit_identical(w, b):
    updates = {"w": w, "b": b}
    out, _ = _update(updates, record_nonfinite().init(updates))
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(updates), strict=True):
        assert np.asarray(got).tobytes() == want.tobytes()


def test_the_first_non_finite_update_is_recorded_and_never_changed():
    transform = record_nonfinite()
    params = {"w": jnp.zeros(3)}
    state = transform.init(params)
    sequence = [1.0, 2.0, np.nan, 3.0, np.inf, -np.inf]
    for value in sequence:
        _, state = _update({"w": jnp.full(3, value, jnp.float32)}, state)
    assert (int(state.count), int(state.first_step)) == (len(sequence), 2)
    assert find_records({"opt": (optax.EmptyState(), state)}) == [state]


def _scheduled(huge_at: int, recorded: bool):
    """A loop whose optimizer scales by a schedule that overflows at one step."""
    schedule = lambda count: jnp.where(count == huge_at, toy.HUGE_LR, -toy.LR)  # noqa: E731
    parts = [optax.trace(decay=0.5), optax.scale_by_schedule(schedule)]
    optimizer = optax.chain(*parts, *([record_nonfinite()] if recorded else []))

    def step(state, batch):
        loss, grads = jax.value_and_grad(toy.loss_fn)(state["params"], batch["x"])
        updates, opt = optimizer.update(grads, state["opt"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "opt": opt}, {"loss": loss, "grads": grads}

    params = toy.init_state()["params"]
    return step, {"params": params, "opt": optimizer.init(params)}


@pytest.mark.parametrize("recorded, halt_step", [(True, 5), (False, 6)])
def test_the_guard_reads_the_record_at_its_sync(recorded, halt_step):
    # With the guard's own state check off, only the record sees step 5's overflowing
    # update at once; without it the run halts at step 6, whose loss is non-finite.
    step, state = _scheduled(huge_at=5, recorded=recorded)
    guard = Guard(step, sync_every=4, check=lambda state: ())
    with pytest.raises(GuardHalt) as caught:
        guard.run(state, toy.make_batches())
    assert caught.value.step == halt_step
    assert np.isfinite(caught.value.loss) == recorded


def _loop_over(optimizer: optax.GradientTransformation):
    """The toy's step with ``optimizer`` (given the parameters), and its first state."""

    def step(state, batch):
        loss, grads = jax.value_and_grad(toy.loss_fn)(state["params"], batch["x"])
        updates, opt = optimizer.update(grads, state["opt"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "opt": opt}, {"loss": loss, "grads": grads}

    params = toy.init_state()["params"]
    return step, {"params": params, "opt": optimizer.init(params)}


def _accumulating(huge_at: int, placement: str):
    """optax.MultiSteps(k=2) over a schedule that overflows at one optimizer step."""
    schedule = lambda count: jnp.where(count == huge_at, toy.HUGE_LR, -toy.LR)  # noqa: E731
    inner = optax.chain(optax.trace(decay=0.5), optax.scale_by_schedule(schedule))
    if placement == "after":  # documented: it sees the update each call applies
        optimizer = optax.chain(optax.MultiSteps(inner, every_k_schedule=2), record_nonfinite())
    else:  # inside: it sees, and counts, only the optimizer steps MultiSteps emits
        optimizer = optax.MultiSteps(optax.chain(inner, record_nonfinite()), every_k_schedule=2)
    return _loop_over(optimizer)


@pytest.mark.parametrize(
    "placement, state_check, first_step",
    [("after", False, 4), ("after", True, 4), ("inside", True, 2)],
)
def test_under_multisteps_the_guard_halts_at_the_call_applying_the_bad_update(
    placement, state_check, first_step
):
    # MultiSteps runs its inner optimizer on every call and masks the result with
    # ``emit * update``: optimizer step 2's overflowing update (count 2) is already
    # computed on micro-step 4, where 0 * inf puts a NaN into the parameters. Micro-step
    # 4 is where the run breaks; its loss and gradient are finite.
    step, state = _accumulating(huge_at=2, placement=placement)
    guard = Guard(step, sync_every=4, check=None if state_check else (lambda state: ()))
    with pytest.raises(GuardHalt) as caught:
        guard.run(state, toy.make_batches())
    assert caught.value.step == 4
    assert np.isfinite(caught.value.loss) and np.isfinite(caught.value.grad_norm)
    assert [int(r.first_step) for r in find_records(caught.value.context.state)] == [-1]
    # The record's own count: micro-steps (calls) after MultiSteps, optimizer steps inside.
    after = guard.run(state, toy.make_batches()[:6], enforce=False).state
    assert [int(r.first_step) for r in find_records(after)] == [first_step]


def test_inside_multisteps_a_flagged_then_zeroed_update_halts_at_the_call_emitting_it():
    # Inside MultiSteps(k=2) the record counts optimizer steps: step 2 is emitted by
    # micro-step 5. zero_nans then hides the NaN update, so nothing but the record sees
    # it; mapping its count onto micro-steps would name step 6.
    schedule = lambda count: jnp.where(count == 2, jnp.nan, -toy.LR)  # noqa: E731
    inner = optax.chain(optax.scale_by_schedule(schedule), record_nonfinite(), optax.zero_nans())
    optimizer = optax.MultiSteps(inner, every_k_schedule=2)

    step, state = _loop_over(optimizer)
    with pytest.raises(GuardHalt) as caught:
        Guard(step, sync_every=4).run(state, toy.make_batches())
    assert caught.value.step == 5
    assert np.isfinite(caught.value.loss) and np.isfinite(caught.value.grad_norm)
