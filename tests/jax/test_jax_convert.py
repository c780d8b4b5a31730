"""checkify, eqx.error_if and a raising jax.debug.callback become the documented error."""

from __future__ import annotations

import copy

import equinox as eqx
import jax
import jax.numpy as jnp
import jax_toy as toy
import numpy as np
import optax
import pytest
from jax.experimental import checkify

from nozero import MESSAGE_PATTERN, NonFiniteError
from nozero.jax import Guard, GuardHalt, converts, nonfinite_errors, scan_steps


def test_a_checkify_error_becomes_the_documented_error_at_the_given_step():
    checked = jax.jit(checkify.checkify(jnp.log, errors=checkify.float_checks))
    err, _ = checked(jnp.float32(2.0))
    with nonfinite_errors(7):
        err.throw()  # a clean result raises nothing
    err, _ = checked(jnp.float32(-1.0))
    with pytest.raises(NonFiniteError) as caught, nonfinite_errors(7, loss=0.5):
        err.throw()
    assert (caught.value.step, caught.value.loss) == (7, 0.5)
    assert np.isnan(caught.value.grad_norm)
    assert MESSAGE_PATTERN.fullmatch(str(caught.value))
    assert isinstance(caught.value.__cause__, checkify.JaxRuntimeError)


def test_other_errors_pass_through_unchanged():
    with pytest.raises(ValueError, match="a bad shape"), nonfinite_errors(3):
        raise ValueError("a bad shape")


def _error_if_step(state, batch):
    x = eqx.error_if(batch["x"], ~jnp.isfinite(batch["x"]).all(), "non-finite input")
    return toy.step(state, {**batch, "x": x})


@pytest.mark.parametrize("jit", [jax.jit, eqx.filter_jit], ids=["jit", "filter_jit"])
def test_an_error_if_step_becomes_the_documented_error_under_either_jit(jit):
    step = jit(_error_if_step)
    batches = copy.deepcopy(toy.make_batches())
    batches[2]["x"][1, 1] = np.nan
    state = toy.init_state()
    with pytest.raises(NonFiniteError) as caught:
        for i, batch in enumerate(batches):
            with nonfinite_errors(i):
                state, metrics = step(state, batch)
                jax.block_until_ready(metrics)
    assert caught.value.step == 2
    assert MESSAGE_PATTERN.fullmatch(str(caught.value))
    assert converts(caught.value.__cause__) and "non-finite input" in str(caught.value.__cause__)


def _raise_on_nonfinite(x):
    if not np.isfinite(x).all():
        raise FloatingPointError("non-finite input")


def _callback_step(state, batch):
    jax.debug.callback(_raise_on_nonfinite, batch["x"])
    return toy.step(state, batch)


@pytest.mark.parametrize(
    "step",
    [_error_if_step, eqx.filter_jit(_error_if_step), _callback_step],
    ids=["error_if", "error_if_filter_jit", "callback"],
)
@pytest.mark.parametrize("multi", [False, True], ids=["single", "scan"])
def test_a_raise_inside_a_guarded_step_halts_at_its_exact_step(step, multi):
    k = 6
    batches = copy.deepcopy(toy.make_batches())
    batches[k]["x"][0, 1] = np.inf
    before_k = Guard(toy.step).run(toy.init_state(), batches[:k]).state
    guard = Guard(step, multi_step=scan_steps(step) if multi else None, sync_every=4)
    with pytest.raises(GuardHalt) as caught:
        guard.run(toy.init_state(), toy.stack(batches, 3) if multi else batches)
    err = caught.value
    assert err.step == k
    assert MESSAGE_PATTERN.fullmatch(str(err))
    assert converts(err.__cause__) and "non-finite input" in str(err.__cause__)
    for got, want in zip(toy.leaves(err.context.state), toy.leaves(before_k), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _grad_checked_step(state, batch):
    new_state, metrics = toy.step(state, batch)
    bad = ~jnp.isfinite(optax.tree.norm(metrics["grads"]))
    return new_state, {**metrics, "loss": eqx.error_if(metrics["loss"], bad, "non-finite grad")}


@pytest.mark.parametrize("multi", [False, True], ids=["single", "scan"])
def test_a_raising_step_halts_with_its_real_loss_and_grad_norm_from_the_unchecked_step(multi):
    k = 5
    batches = copy.deepcopy(toy.make_batches())
    batches[k]["x"][2, 0] = toy.HUGE_INPUT  # a finite loss, a gradient norm of inf
    # What the step reports when nothing raises: its true values.
    plain = Guard(toy.step, sync_every=4)
    with pytest.raises(GuardHalt) as truth:
        plain.run(toy.init_state(), batches)
    assert truth.value.step == k and np.isfinite(truth.value.loss)
    multi_step = scan_steps(_grad_checked_step) if multi else None
    fed = toy.stack(batches, 3) if multi else batches
    for unchecked, want in [(None, (np.nan, np.nan)), (toy.step, truth.value)]:
        guard = Guard(_grad_checked_step, multi_step=multi_step, unchecked=unchecked)
        with pytest.raises(GuardHalt) as caught:
            guard.run(toy.init_state(), fed)
        err = caught.value
        assert err.step == k and "non-finite grad" in str(err.__cause__)
        wanted = (want.loss, want.grad_norm) if unchecked else want
        np.testing.assert_array_equal((err.loss, err.grad_norm), wanted)
        np.testing.assert_array_equal(
            (err.context.loss, err.context.grad_norm), (err.loss, err.grad_norm)
        )
        assert MESSAGE_PATTERN.fullmatch(str(err))
