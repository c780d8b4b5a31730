"""A real Lightning ``fit`` halts at the exact step with the last good step's weights."""

from __future__ import annotations

import copy
import math

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("pytorch_lightning")

from guard_toy import batch as make_batch  # noqa: E402

from nozero.contract import parse_message  # noqa: E402
from nozero.torch import GuardHalt  # noqa: E402
from nozero.torch.lightning import NonFiniteGuard  # noqa: E402


class Regression(pl.LightningModule):
    def __init__(self, poison_batches: set[int], fused: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )
        self.poison_batches = poison_batches
        self.fused = fused

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        if self.fused:
            return torch.optim.AdamW(self.parameters(), lr=0.01, fused=True)
        return torch.optim.Adam(self.parameters(), lr=0.01, foreach=True)

    def train_dataloader(self):
        data = [make_batch(i, poison=i in self.poison_batches) for i in range(64)]
        return torch.utils.data.DataLoader(data, batch_size=None)


def _trainer(**options) -> pl.Trainer:
    """A CPU Trainer with no logger, checkpoints, progress bar or summary."""
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )


class Snapshots(pl.Callback):
    """The weights after each optimizer step, by the step's index."""

    def __init__(self) -> None:
        self.after: dict[int, dict] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.after[trainer.global_step - 1] = copy.deepcopy(pl_module.state_dict())


@pytest.mark.parametrize(
    ("accumulate", "fused", "sync_every"), [(1, True, 4), (2, False, 16), (1, False, 1)]
)
def test_fit_halts_at_the_exact_step(accumulate, fused, sync_every):
    bad_step = 5
    # The poisoned micro-batch is the last of optimizer step 5.
    poisoned = (bad_step + 1) * accumulate - 1
    module = Regression({poisoned}, fused)
    snaps = Snapshots()
    trainer = _trainer(
        max_steps=20,
        accumulate_grad_batches=accumulate,
        callbacks=[snaps, NonFiniteGuard(sync_every=sync_every)],
    )
    with pytest.raises(GuardHalt) as caught:
        trainer.fit(module)
    err = caught.value
    assert err.step == bad_step and parse_message(str(err))[0] == bad_step
    assert math.isnan(err.loss)
    live = module.state_dict()
    for name, value in snaps.after[bad_step - 1].items():
        assert torch.equal(live[name], value), name
    assert math.isnan(float(err.context.batch[0][0, 0]))
    optimizer = trainer.optimizers[0]
    assert not optimizer._optimizer_step_pre_hooks  # Lightning's teardown took them off


class TwoOptimizers(pl.LightningModule):
    """Manual optimization, GAN style: two networks, two optimizers, stepped in turn."""

    def __init__(self, poison_batches: set[int]) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.automatic_optimization = False
        self.first = torch.nn.Linear(4, 1)
        self.second = torch.nn.Linear(4, 1)
        self.poison_batches = poison_batches
        self.after: dict[int, dict] = {}

    def training_step(self, batch, batch_idx):
        x, y = batch
        for net, opt in zip((self.first, self.second), self.optimizers(), strict=True):
            self.manual_backward(torch.nn.functional.mse_loss(net(x), y))
            opt.step()
            opt.zero_grad()
        self.after[batch_idx] = copy.deepcopy(self.state_dict())

    def configure_optimizers(self):
        return (
            torch.optim.AdamW(self.first.parameters(), lr=0.01, fused=True),
            torch.optim.Adam(self.second.parameters(), lr=0.01, foreach=True),
        )

    def train_dataloader(self):
        data = [make_batch(i, poison=i in self.poison_batches) for i in range(32)]
        return torch.utils.data.DataLoader(data, batch_size=None)


def test_manual_optimization_with_two_optimizers_halts_at_the_exact_step():
    module = TwoOptimizers({5})
    trainer = _trainer(max_epochs=1, callbacks=[NonFiniteGuard(sync_every=4)])
    with pytest.raises(GuardHalt) as caught:
        trainer.fit(module)
    assert caught.value.step == 5 and math.isnan(caught.value.loss)
    live = module.state_dict()
    for name, value in module.after[4].items():
        assert torch.equal(live[name], value), name
