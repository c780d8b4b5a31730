"""The plain-loop guard halts at the exact step, and no bad update ever lands."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from guard_toy import (  # noqa: E402
    OPTIMIZERS,
    assert_state_equal,
    batch,
    loss_of,
    model,
    snapshot,
)

from nozero.contract import NonFiniteError, parse_message  # noqa: E402
from nozero.torch import Guard, GuardHalt  # noqa: E402

BAD = 5
STEPS = 24


def _train(opt_name: str, sync_every: int, poison: set[int], grad_poison: set[int] = frozenset()):
    """Run the loop to a halt; return the error, the model, optimizer and snapshots."""
    net = model()
    opt = OPTIMIZERS[opt_name](net.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    saved = {}
    with pytest.raises(GuardHalt) as caught:
        with Guard(opt, sync_every, model=net) as guard:
            for step in range(STEPS):
                data = batch(step, poison=step in poison)
                loss = loss_of(net, data)
                loss.backward()
                if step in grad_poison:
                    net[0].weight.grad[0, 0] = math.inf
                guard.step(loss, batch=data)
                scheduler.step()
                opt.zero_grad()
                saved[step] = snapshot(net, opt)
    return caught.value, net, opt, saved


@pytest.mark.parametrize("sync_every", [1, 16])
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_halts_at_the_exact_step_with_the_last_good_state(opt_name, sync_every):
    err, net, opt, saved = _train(opt_name, sync_every, poison={BAD, BAD + 2})
    assert isinstance(err, NonFiniteError)
    assert err.step == BAD
    assert parse_message(str(err))[0] == BAD
    assert math.isnan(err.loss) and math.isnan(err.grad_norm)
    assert_state_equal(net, opt, saved[BAD - 1])
    ctx = err.context
    assert ctx.step == BAD and ctx.batch is not None
    assert math.isnan(float(ctx.batch[0][0, 0]))
    # The halt comes at the first sync point at or after the bad step.
    halted_at = ((BAD // sync_every) + 1) * sync_every
    assert ctx.after["optimizer_steps"] == halted_at - BAD
    assert ctx.after["batches"] == halted_at - BAD - 1
    assert ctx.after["lr_at_step"][0] == pytest.approx(opt.defaults["lr"] * 0.9**BAD)
    assert ctx.after["lr_now"][0] == opt.param_groups[0]["lr"]
    assert ctx.state["optimizer"]["state"].keys() == saved[BAD - 1]["optimizer"]["state"].keys()


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_a_bad_first_step_leaves_the_optimizer_as_built(opt_name):
    """The first step creates the state it masks: the halt drops it, as if never stepped."""
    fresh_net = model()
    fresh = snapshot(fresh_net, OPTIMIZERS[opt_name](fresh_net.parameters()))
    err, net, opt, _ = _train(opt_name, 4, poison={0})
    assert err.step == 0
    assert opt.state_dict()["state"] == {}
    assert_state_equal(net, opt, fresh)
    assert err.context.state["optimizer"]["state"] == {}


@pytest.mark.parametrize("opt_name", ["adam-foreach", "adamw-fused", "sgd-forloop"])
def test_an_infinite_gradient_with_a_finite_loss_halts(opt_name):
    err, net, opt, saved = _train(opt_name, 4, poison=set(), grad_poison={BAD})
    assert err.step == BAD
    assert math.isfinite(err.loss) and math.isinf(err.grad_norm)
    assert_state_equal(net, opt, saved[BAD - 1])


def test_a_clean_run_trains_and_closes_quietly():
    net = model()
    opt = OPTIMIZERS["adam-fused"](net.parameters())
    first = loss_of(net, batch(0)).item()
    with Guard(opt, sync_every=3) as guard:
        for step in range(10):
            loss = loss_of(net, batch(step))
            loss.backward()
            guard.step(loss)
            opt.zero_grad()
    assert guard.steps == 10
    assert loss_of(net, batch(0)).item() < first
    # Closed: the hooks are off, the optimizer steps on its own again.
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks


def test_close_finds_a_bad_step_after_the_last_sync():
    net = model()
    opt = OPTIMIZERS["sgd-foreach"](net.parameters())
    guard = Guard(opt, sync_every=100)
    for step in range(6):
        loss = loss_of(net, batch(step, poison=step == 4))
        loss.backward()
        guard.step(loss)
        opt.zero_grad()
    with pytest.raises(GuardHalt) as caught:
        guard.close()
    assert caught.value.step == 4
    assert caught.value.context.after["optimizer_steps"] == 2


def test_gradient_accumulation_counts_optimizer_steps():
    net = model()
    opt = OPTIMIZERS["adam-foreach"](net.parameters())
    guard = Guard(opt, sync_every=2)
    micro = 3
    with pytest.raises(GuardHalt) as caught:
        for step in range(8):
            for m in range(micro):
                # Only the second micro-batch of optimizer step 3 is poisoned.
                loss = loss_of(net, batch(10 * step + m, poison=(step, m) == (3, 1))) / micro
                loss.backward()
                guard.observe(loss * micro)
            guard.apply()
            opt.zero_grad()
    assert caught.value.step == 3
    assert caught.value.context.after["batches"] == 0


def test_bad_arguments_are_named():
    net = model()
    opt = OPTIMIZERS["sgd-forloop"](net.parameters())
    with pytest.raises(ValueError, match="sync_every"):
        Guard(opt, sync_every=0)
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        Guard(net, sync_every=1)
    with pytest.raises(ValueError, match="max_scaler_skips"):
        Guard(opt, scaler=torch.amp.GradScaler("cpu"), max_scaler_skips=0)


def test_close_after_a_delivered_halt_does_not_raise_it_again():
    net = model()
    opt = OPTIMIZERS["sgd-fused"](net.parameters())
    guard = Guard(opt, sync_every=1)
    loss = loss_of(net, batch(0, poison=True))
    loss.backward()
    with pytest.raises(GuardHalt):
        guard.step(loss)
    guard.close()
    assert not opt._optimizer_step_pre_hooks
    with pytest.raises(ValueError, match=r"scalar tensor, got shape \(16, 1\)"):
        Guard(opt).observe(net(batch(1)[0]))


def _overflowing_step() -> tuple[torch.nn.Module, torch.Tensor]:
    """A model and a finite loss whose gradient norm overflows float32 (finite elements)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    x = torch.randn(8, 4)
    x[0, 0] = 3.4e38
    loss = torch.nn.functional.binary_cross_entropy_with_logits(net(x), torch.ones(8, 1))
    return net, loss


@pytest.mark.parametrize("how", ["guard clips", "loop passes the norm"])
def test_clipping_cannot_hide_an_overflowed_norm(how):
    net, loss = _overflowing_step()
    opt = OPTIMIZERS["adamw-foreach"](net.parameters())
    guard = Guard(opt, sync_every=1, max_grad_norm=1.0 if how == "guard clips" else None)
    saved = snapshot(net, opt)
    loss.backward()
    assert math.isfinite(loss.item())
    with pytest.raises(GuardHalt) as caught:
        if how == "guard clips":
            guard.step(loss)
        else:
            guard.step(loss, grad_norm=torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0))
    assert caught.value.step == 0 and math.isinf(caught.value.grad_norm)
    assert_state_equal(net, opt, saved)


def test_the_guards_clipping_equals_clip_grad_norm():
    runs = []
    for guarded in (False, True):
        net = model()
        opt = OPTIMIZERS["adam-fused"](net.parameters())
        guard = Guard(opt, sync_every=4, max_grad_norm=0.5) if guarded else None
        for step in range(6):
            loss = loss_of(net, batch(step)) * 100  # gradients well above the threshold
            loss.backward()
            if guard is None:
                torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
                opt.step()
            else:
                guard.step(loss)
            opt.zero_grad()
        runs.append(snapshot(net, opt)["model"])
    for name, value in runs[0].items():
        assert torch.equal(value, runs[1][name]), name


@pytest.mark.parametrize("opt_name", ["adamw-fused", "adamw-foreach"])
def test_the_exact_step_while_the_gradients_change_shape(opt_name):
    """Steps with fewer gradients (a frozen layer) and a group added mid-run share a window."""
    net = model()
    head = torch.nn.Linear(1, 1)
    opt = OPTIMIZERS[opt_name](net.parameters())
    guard = Guard(opt, sync_every=16)
    saved = {}
    with pytest.raises(GuardHalt) as caught:
        for step in range(12):
            net[0].requires_grad_(step % 3 != 1)  # every third step has two gradients, not four
            if step == 4:
                opt.add_param_group({"params": list(head.parameters())})
            data = batch(step, poison=step == 9)
            loss = loss_of(net, data) + (head(net(data[0])).mean() if step >= 4 else 0.0)
            loss.backward()
            guard.step(loss)
            opt.zero_grad()
            saved[step] = snapshot(net, opt)
        guard.close()
    assert caught.value.step == 9
    assert math.isnan(caught.value.loss)
    assert_state_equal(net, opt, saved[8])


def test_the_error_reports_the_bad_steps_own_loss_and_norm():
    """The loss and global norm of the first bad step, not of a later step in its window."""
    net = model()
    opt = OPTIMIZERS["adam-fused"](net.parameters())
    guard = Guard(opt, sync_every=16)
    seen = {}
    for step in range(8):
        loss = loss_of(net, batch(step)) * (1e3 if step == 5 else 1.0)
        loss.backward()
        if step == 5:
            net[2].weight.grad[0, 0] = math.inf
        seen[step] = (
            loss.item(),
            torch.nn.utils.get_total_norm([p.grad for p in net.parameters()]).item(),
        )
        guard.step(loss)
        opt.zero_grad()
    with pytest.raises(GuardHalt) as caught:
        guard.close()
    assert caught.value.step == 5
    assert caught.value.loss == pytest.approx(seen[5][0], rel=1e-6)
    assert math.isinf(caught.value.grad_norm) and math.isinf(seen[5][1])
