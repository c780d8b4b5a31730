"""A guard tells ``pytest --nozero`` which steps it checked, as ``check_finite`` does, so
a guarded loop that returns its model (no history) passes the ``overflow`` check."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from guard_toy import batch, loss_of, model  # noqa: E402
from recipe_runs import assert_recipe_passes_and_broken_copy_fails, run_recipe  # noqa: E402

from nozero.contract import watching_checks  # noqa: E402
from nozero.torch import Guard, GuardHalt  # noqa: E402

pytest_plugins = ["pytester"]


def _watched_run(steps: int, poison: set[int]) -> tuple[list, list[float], GuardHalt | None]:
    net = model()
    opt = torch.optim.AdamW(net.parameters(), lr=0.01, fused=True)
    seen: list = []
    losses: list[float] = []
    halt = None
    with watching_checks(lambda *values: seen.append(values)):
        try:
            with Guard(opt, sync_every=16) as guard:
                for step in range(steps):
                    loss = loss_of(net, batch(step, poison=step in poison))
                    loss.backward()
                    guard.step(loss)
                    opt.zero_grad()
                    losses.append(loss.item())
        except GuardHalt as err:
            halt = err
    return seen, losses, halt


def test_each_synced_step_is_reported_with_its_own_loss_and_norm():
    seen, losses, halt = _watched_run(20, poison=set())
    assert halt is None
    assert [step for step, _, _ in seen] == list(range(20))  # 16 at the sync, 4 at close
    assert [loss for _, loss, _ in seen] == pytest.approx(losses, rel=1e-6)
    assert all(math.isfinite(norm) and norm > 0 for _, _, norm in seen)


def test_steps_are_reported_up_to_the_bad_one_not_past_it():
    seen, _, halt = _watched_run(20, poison={5})
    assert halt is not None and halt.step == 5
    assert [step for step, _, _ in seen] == list(range(6))
    assert math.isnan(seen[-1][1]) and all(math.isfinite(loss) for _, loss, _ in seen[:-1])


RETURNS_ITS_MODEL = """
# conftest.py: a guarded loop that returns its model and no history
import numpy as np
import pytest
import torch

from nozero.testing import TrainerUnderTest
from nozero.torch import Guard

rng = np.random.default_rng(0)
EXAMPLE = {"x": rng.standard_normal((8, 4)).astype(np.float32),
           "y": rng.standard_normal((8, 1)).astype(np.float32)}


def train(batches):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with Guard(optimizer, sync_every=16) as guard:
        for batch in batches:
            x, y = torch.from_numpy(batch["x"]), torch.from_numpy(batch["y"])
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            guard.step(loss)
            optimizer.zero_grad()
    return model


@pytest.fixture
def nozero_trainer():
    return TrainerUnderTest.from_example(EXAMPLE, train)
"""


def test_a_guarded_loop_returning_its_model_passes_overflow(pytester):
    """A huge input can leave this loss finite (tanh saturates); the guard's report vouches."""
    unguarded = RETURNS_ITS_MODEL.replace("guard.step(loss)", "optimizer.step()")
    result = run_recipe(pytester, RETURNS_ITS_MODEL, unguarded, examples=3, limit=150)
    assert_recipe_passes_and_broken_copy_fails(result)
