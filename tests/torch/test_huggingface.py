"""A real ``transformers.Trainer.train()`` on a tiny GPT-2 halts at the exact step."""

from __future__ import annotations

import copy
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from nozero.contract import parse_message  # noqa: E402
from nozero.torch import GuardHalt  # noqa: E402
from nozero.torch.huggingface import NonFiniteGuard  # noqa: E402

HIDDEN = 16
LENGTH = 8


class Embeddings(torch.utils.data.Dataset):
    """Random embedded sequences; the ``poison``-th item fetched carries a NaN.

    Counting fetches, not indices, poisons a known optimizer step whatever order the
    Trainer's sampler picks.
    """

    def __init__(self, size: int, poison: int) -> None:
        self.size = size
        self.poison = poison
        self.fetched = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(index)
        embeds = torch.randn(LENGTH, HIDDEN, generator=gen)
        if self.fetched == self.poison:
            embeds[0, 0] = math.nan
        self.fetched += 1
        return {"inputs_embeds": embeds, "labels": torch.randint(0, 32, (LENGTH,), generator=gen)}


class Snapshots(transformers.TrainerCallback):
    def __init__(self) -> None:
        self.after: dict[int, dict] = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.after[state.global_step - 1] = copy.deepcopy(model.state_dict())


def _trainer(tmp_path, data, callbacks, *, accumulate=1, optim="adamw_torch", steps=10):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=32, n_positions=LENGTH, n_embd=HIDDEN, n_layer=1, n_head=2
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=accumulate,
        learning_rate=1e-3,
        max_grad_norm=0.05,  # well below the gradients' norm: every step clips
        optim=optim,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    model = transformers.GPT2LMHeadModel(config)
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)


@pytest.mark.parametrize(("accumulate", "optim"), [(2, "adamw_torch"), (1, "adamw_torch_fused")])
def test_train_halts_at_the_exact_step(tmp_path, accumulate, optim):
    bad_step, per_device = 5, 2
    # The last item of the last micro-batch of optimizer step 5 (synced at step 7).
    poison = (bad_step + 1) * accumulate * per_device - 1
    snaps = Snapshots()
    callbacks = [snaps, NonFiniteGuard(sync_every=4)]
    trainer = _trainer(
        tmp_path, Embeddings(64, poison), callbacks, accumulate=accumulate, optim=optim
    )
    with pytest.raises(GuardHalt) as caught:
        trainer.train()
    err = caught.value
    assert err.step == bad_step and parse_message(str(err))[0] == bad_step
    assert math.isnan(err.loss)
    live = trainer.model.state_dict()
    for name, value in snaps.after[bad_step - 1].items():
        assert torch.equal(live[name], value), name
    assert not trainer.optimizer.optimizer._optimizer_step_pre_hooks
    assert trainer.args.max_grad_norm == 0.05  # the clipping the callback took over, back


def test_the_callbacks_clipping_equals_the_trainers(tmp_path):
    weights = []
    for callbacks in ([], [NonFiniteGuard(sync_every=2)]):
        trainer = _trainer(tmp_path, Embeddings(64, poison=-1), callbacks, steps=3)
        trainer.train()
        weights.append(trainer.model.state_dict())
    for name, value in weights[0].items():
        assert torch.equal(value, weights[1][name]), name
