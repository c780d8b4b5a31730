"""``--on-nonfinite restart`` rolls back past checkpoints whose loss had already diverged.

The judgement (:mod:`nozero_trainer.divergence`) on hand-made loss histories, then a real
run that diverges through ever larger finite losses (1e20, 1e26, 1e32) before a step goes
non-finite: the restart skips the diverged checkpoints, goes back to the last one from
before the divergence, and the run at half the rate finishes.
"""

from __future__ import annotations

import json
import math
import statistics

import pytest

from nozero_trainer import checkpoint as ckpt
from nozero_trainer.cli import main
from nozero_trainer.divergence import FACTOR, LossHistory
from nozero_trainer.postmortem import find_bundles

from .helpers import tiny_flags


def _history(losses):
    history = LossHistory()
    history.record(0, losses)
    return history


def test_a_steady_run_and_one_unlucky_batch_have_not_diverged():
    steady = [0.5, 0.4, 0.45, 0.3, 0.35, 0.3, 0.32, 0.31]
    assert all(_history(steady).diverged(step) is None for step in range(len(steady) + 1))
    spike = [*steady[:5], 0.3 * FACTOR * 10, *steady[5:]]  # one batch, 1000x the rest
    assert all(_history(spike).diverged(step) is None for step in range(len(spike) + 1))


def test_a_climbing_loss_has_diverged_long_before_it_is_non_finite():
    losses = [0.5, 0.4, 0.3, 0.3, 0.3, 3.0, 1e3, 1e8, 1e20, 1e36, math.inf]
    history = _history(losses)
    assert [history.diverged(step) is None for step in range(len(losses))] == [
        *[True] * 5,  # up to the checkpoint after step 4 (its next steps: 0.3, 3, 1e3)
        *[False] * 6,  # from the one after step 5 (its next steps: 3, 1e3, 1e8)
    ]
    assert history.diverged(7) == "its loss 1e+20 was over 100x the best so far, 0.3"
    assert history.diverged(10) == "its loss was not finite"
    assert _history([0.5, math.nan, math.nan]).diverged(1) == "its loss was not finite"


def test_a_restart_forgets_what_the_abandoned_steps_logged():
    history = _history([0.5, 0.4, 0.3, 1e9, 1e12, 1e15])
    assert history.diverged(4) is not None
    history.forget_from(3)
    assert history.diverged(4) is None  # the climb it was judged by is forgotten
    history.record(3, [0.3, 0.29, 0.28])
    assert history.diverged(4) is None


def test_a_resumed_run_reads_the_losses_back_as_its_restarts_left_them():
    events = [
        *({"event": "train", "step": s, "loss": v} for s, v in enumerate([0.5, 0.4, 0.3])),
        *({"event": "train", "step": s, "loss": v} for s, v in [(3, 1e9), (4, 1e12), (5, 1e15)]),
        {"event": "halt", "step": 5},
        {"event": "restart", "step": 3},
        {"event": "train", "step": 3, "loss": 0.3},
        {"step": 4, "loss": 0.29},  # records from before the event tag
        {"event": "eval", "step": 4, "pr_auc": {}},
        {"event": "resume", "step": 4},
        {"event": "train", "step": 4, "loss": 0.28},
        {"event": "train", "step": 5, "loss": math.inf},
    ]
    history = LossHistory()
    history.replay(events)
    assert history.losses == {0: 0.5, 1: 0.4, 2: 0.3, 3: 0.3, 4: 0.28, 5: math.inf}
    assert history.diverged(3) is None and history.diverged(5) == "its loss was not finite"


# A linear model whose learning rate times its weight decay passes 2 during the warmup:
# AdamW's decay then multiplies the weights by a growing factor every step, so the loss
# climbs through finite values (1e5 at step 20, 1e20 at 40, 1e32 at 60; measured) until
# a step overflows around step 66. Half the rate (3) climbs only to ~1e24, and then
# recovers as the cosine decay lowers the rate: the restart finishes.
CLIMBING = dict(
    steps=150,
    hidden_dims=(),
    peak_lr=6.0,
    weight_decay=1.0,
    warmup_steps=20,
    eval_every=10,
    sync_every=10,
    chunk_steps=10,
)


def test_a_restart_rolls_back_to_the_last_checkpoint_before_the_divergence(
    data_dir, tmp_path, capsys
):
    out = tmp_path / "run"
    flags = ["--on-nonfinite", "restart", "--max-restarts", "1", *tiny_flags(**CLIMBING)]
    capsys.readouterr()
    code = main(["train", "--data", str(data_dir), "--out", str(out), *flags])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr[-3000:]
    assert "finished at step 150 after 1 restart(s)" in stdout

    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    [halt] = [e for e in events if e.get("event") == "halt"]
    [restart] = [e for e in events if e.get("event") == "restart"]
    first_attempt = {
        e["step"]: e["loss"] for e in events[: events.index(halt)] if e.get("event") == "train"
    }
    finite = [v for v in first_attempt.values() if v is not None]
    # It diverged through huge but finite losses before its halt...
    assert max(finite) > 1e30 and halt["step"] > 60
    # ...so the checkpoints saved on the way up (the three newest: the rollback without this
    # judgement would have restarted from the last) were passed over, newest first.
    passed = [entry.split(" ")[0] for entry in restart["passed_over"]]
    assert [int(name.split("-")[1]) for name in passed] == [60, 50, 40]
    assert all("was over 100x the best so far" in e for e in restart["passed_over"])
    # The checkpoint it went back to came before the divergence: its loss was still small.
    back = restart["step"]
    assert 0 < back < 40 and restart["lr_scale"] == 0.5
    assert statistics.median(first_attempt[s] for s in range(back, back + 3)) < 10
    assert all(first_attempt[int(name.split("-")[1])] > 1e5 for name in passed)
    for entry in restart["passed_over"]:
        assert f"!!! passed over {entry}" in stderr
    assert f"restarting from step {back} (step-{back:08d}-" in stderr
    # The diverged checkpoints are gone, so neither pruning nor a --resume can pick them.
    manifest = ckpt.verify_checkpoint(ckpt.latest_checkpoint(out))
    assert manifest["step"] == 150 and manifest["state"] == {"lr_scale": 0.5, "restarts": 1}
    assert len(find_bundles(out)) == 1


@pytest.mark.parametrize("kept", [1, 3])
def test_pruning_spares_the_checkpoint_a_rollback_needs(tmp_path, kept):
    import numpy as np

    params, opt_state = {"w": np.ones(2, np.float32)}, {"m": np.zeros(2, np.float32)}
    good = ckpt.save_checkpoint(tmp_path, 10, params, opt_state, {}, keep=kept)
    for step in (20, 30, 40, 50):
        ckpt.save_checkpoint(tmp_path, step, params, opt_state, {}, keep=kept, also_keep=good.name)
    steps = [step for step, _ in ckpt.list_checkpoints(tmp_path)]
    assert steps == [10, *[20, 30, 40, 50][-kept:]]
    removed = ckpt.roll_back(tmp_path, good)
    assert ckpt.latest_checkpoint(tmp_path) == good and len(removed) == kept
    assert [step for step, _ in ckpt.list_checkpoints(tmp_path)] == [10]
