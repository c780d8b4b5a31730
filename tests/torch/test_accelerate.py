"""A plain accelerate loop: the guard takes accelerate's optimizer as the loop has it."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")

from guard_toy import OPTIMIZERS, assert_state_equal, batch, loss_of, model, snapshot  # noqa: E402

from nozero.torch import Guard, GuardHalt  # noqa: E402

BAD_STEP = 3


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("opt_name", ["adamw-fused", "adam-foreach"])
def test_an_accelerate_loop_halts_at_the_exact_optimizer_step(opt_name, accumulate):
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=accumulate)
    net = model()
    net, opt = accelerator.prepare(net, OPTIMIZERS[opt_name](net.parameters()))
    assert not isinstance(opt, type(opt.optimizer))  # the loop holds accelerate's wrapper
    saved = {}
    with pytest.raises(GuardHalt) as caught:
        with Guard(opt, sync_every=4, model=net) as guard:
            for micro in range(12 * accumulate):
                step = micro // accumulate
                # The last micro-batch of optimizer step 3 carries the NaN.
                poison = micro == (BAD_STEP + 1) * accumulate - 1
                with accelerator.accumulate(net):
                    loss = loss_of(net, batch(micro, poison=poison))
                    accelerator.backward(loss)
                    guard.step(loss)
                    opt.zero_grad()
                if (micro + 1) % accumulate == 0:
                    saved[step] = snapshot(net, opt.optimizer)
    err = caught.value
    assert err.step == BAD_STEP and math.isnan(err.loss)
    assert_state_equal(net, opt.optimizer, saved[BAD_STEP - 1])
    assert guard.steps == 4 * ((BAD_STEP // 4) + 1)  # optimizer steps, not micro-batches
    assert not opt.optimizer._optimizer_step_pre_hooks


def test_a_wrapper_around_nothing_is_named():
    class NotAnOptimizer:
        def step(self) -> None: ...

    with pytest.raises(TypeError, match="NotAnOptimizer"):
        Guard(NotAnOptimizer())


@pytest.mark.parametrize("opt_name", ["adam-fused", "adam-foreach"])
def test_accelerates_own_loss_scaler_skips_an_overflow_and_halts_on_a_nan(opt_name):
    """accelerate's fp16 wrapper steps and updates its own GradScaler (built here on CPU)."""
    from accelerate.optimizer import AcceleratedOptimizer

    net = model()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    opt = AcceleratedOptimizer(OPTIMIZERS[opt_name](net.parameters()), scaler=scaler)
    guard = Guard(opt, sync_every=4)
    saved, scales = {}, {}
    with pytest.raises(GuardHalt) as caught:
        for step in range(12):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = loss_of(net, batch(step, poison=step == 6))
            scaler.scale(loss).backward()
            if step == 2:  # an fp16 overflow: the scaler's skip, not a halt
                net[0].weight.grad[0, 0] = math.inf
            guard.step(loss)
            opt.zero_grad()
            saved[step], scales[step] = snapshot(net, opt.optimizer), scaler.get_scale()
    assert caught.value.step == 6 and math.isnan(caught.value.loss)
    assert scales[2] == scales[1] / 2 and scales[3] == scales[2]  # one update per step
    for name, value in saved[2]["model"].items():
        assert torch.equal(value, saved[1]["model"][name]), name
    assert_state_equal(net, opt.optimizer, saved[5])
