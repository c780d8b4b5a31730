"""Under a GradScaler, an overflow skip is loss scaling; a NaN loss, K skips or a floor halt."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from guard_toy import OPTIMIZERS, batch, loss_of, model, snapshot  # noqa: E402

from nozero.torch import Guard, GuardHalt  # noqa: E402


def _amp_loop(opt_name, steps, *, poison=(), overflow=(), **guard_kwargs):
    """Train under CPU fp16 autocast with a GradScaler; return the guard, net, snapshots."""
    net = model()
    opt = OPTIMIZERS[opt_name](net.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    guard = Guard(opt, sync_every=4, scaler=scaler, **guard_kwargs)
    saved = []
    for step in range(steps):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = loss_of(net, batch(step, poison=step in poison))
        scaler.scale(loss).backward()
        if step in overflow:  # an fp16 overflow in the scaled gradients
            net[0].weight.grad[0, 0] = math.inf
        guard.step(loss)
        opt.zero_grad()
        saved.append((snapshot(net, opt), scaler.get_scale()))
    guard.close()
    return guard, net, opt, saved


@pytest.mark.parametrize("opt_name", ["adam-fused", "adam-foreach"])
def test_an_overflow_skip_is_loss_scaling_not_a_halt(opt_name):
    guard, net, opt, saved = _amp_loop(opt_name, 8, overflow={3})
    assert guard.steps == 8
    (before, scale_before), (at, scale_at) = saved[2], saved[3]
    assert scale_at == scale_before / 2  # the scaler backed off
    for name, value in at["model"].items():
        assert torch.equal(value, before["model"][name])  # the skipped step changed nothing
    # ...and training went on afterwards.
    assert not torch.equal(saved[7][0]["model"]["0.weight"], at["model"]["0.weight"])


def test_a_nan_loss_halts_under_the_scaler():
    with pytest.raises(GuardHalt) as caught:
        _amp_loop("adam-fused", 8, poison={5})
    assert caught.value.step == 5 and math.isnan(caught.value.loss)
    assert caught.value.context.reason == "non-finite loss or gradient"


def test_consecutive_skips_halt_at_the_kth():
    with pytest.raises(GuardHalt) as caught:
        _amp_loop("sgd-foreach", 12, overflow={2, 4, 5, 6}, max_scaler_skips=3)
    err = caught.value
    assert err.step == 6
    assert math.isfinite(err.loss) and math.isinf(err.grad_norm)
    assert err.context.reason == "too many consecutive loss-scaler skips"


def test_a_scale_below_the_floor_halts():
    with pytest.raises(GuardHalt) as caught:
        _amp_loop("adamw-fused", 12, overflow={1, 2}, min_scale=2.0**9)
    err = caught.value
    assert err.step == 2  # 1024 -> 512 at step 1 (the floor), -> 256 at step 2
    assert err.context.reason == "loss scale below its floor"
