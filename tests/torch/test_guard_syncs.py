"""Between sync points the guard reads nothing on the host: every read is counted."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from guard_toy import OPTIMIZERS, batch, loss_of, model  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from nozero.torch import Guard  # noqa: E402

HOST_READS = {"item", "__bool__", "__float__", "__int__", "__index__", "tolist", "cpu", "numpy"}


class HostReads(TorchFunctionMode):
    """Counts every tensor read on the host, except the optimizer's own step counters.

    A for-loop or foreach Adam keeps its step counts as CPU scalars and reads them with
    ``.item()`` for the bias correction; those reads are the optimizer's, with or without
    the guard, and are not device syncs.
    """

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        super().__init__()
        self.opt = opt
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS and not (args and id(args[0]) in _step_counters(self.opt)):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _step_counters(opt: torch.optim.Optimizer) -> set[int]:
    return {id(s["step"]) for s in opt.state.values() if isinstance(s.get("step"), torch.Tensor)}


@pytest.mark.parametrize("opt_name", ["sgd-foreach", "adam-foreach", "adamw-fused", "sgd-forloop"])
def test_no_host_read_between_sync_points(opt_name):
    net = model()
    opt = OPTIMIZERS[opt_name](net.parameters())
    sync_every = 4
    reads = []
    guard = Guard(opt, sync_every)
    for step in range(12):
        loss = loss_of(net, batch(step))
        loss.backward()
        mode = HostReads(opt)
        with mode:
            guard.step(loss, batch=step)
        reads.append(mode.count)
        opt.zero_grad()
    guard.close()
    synced = [(i + 1) % sync_every == 0 for i in range(12)]
    assert [n for n, s in zip(reads, synced, strict=True) if not s] == [0] * 9
    # The counter sees the sync's one read, so the zeros above are real.
    assert all(n >= 1 for n, s in zip(reads, synced, strict=True) if s)


@pytest.mark.parametrize("opt_name", ["adamw-fused", "sgd-foreach"])
def test_no_host_read_between_sync_points_under_a_grad_scaler(opt_name):
    net = model()
    opt = OPTIMIZERS[opt_name](net.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    guard = Guard(opt, sync_every=4, scaler=scaler, max_grad_norm=1.0)
    reads = []
    for step in range(8):
        loss = loss_of(net, batch(step))
        scaler.scale(loss).backward()
        mode = HostReads(opt)
        with mode:
            guard.step(loss)  # unscale, check, clip, step, scaler update
        reads.append(mode.count)
        opt.zero_grad()
    guard.close()
    assert [reads[i] for i in (0, 1, 2, 4, 5, 6)] == [0] * 6
    assert reads[3] >= 1 and reads[7] >= 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("opt_name", ["adam-fused", "adamw-foreach", "sgd-forloop"])
def test_no_cuda_sync_between_sync_points(opt_name):
    net = model().cuda()
    opt = OPTIMIZERS[opt_name](net.parameters())
    guard = Guard(opt, sync_every=8)
    data = [tuple(t.cuda() for t in batch(step)) for step in range(7)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(7):
            loss = loss_of(net, data[step])
            loss.backward()
            guard.step(loss)
            opt.zero_grad()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    guard.close()
    assert guard.steps == 7
