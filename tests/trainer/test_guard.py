"""The guard: exact halt step for NaN/±Inf/huge values anywhere, one compilation, no bad update."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nozero import MESSAGE_PATTERN, NonFiniteError
from nozero.jax import GuardHalt
from nozero_trainer import loop
from nozero_trainer.optim import make_schedule

from .conftest import DIM, HEADS, batches_from, small_config

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]

# A huge finite value keeps the loss finite but not the gradient norm: a guard that
# checks the loss alone halts late on it.
POISONS = [np.nan, np.inf, -np.inf, 1e30]


def _leaves(params) -> list[np.ndarray]:
    return [np.asarray(a) for layer in params for a in (layer["w"], layer["b"])]


def test_poison_at_first_middle_last_step_halts_exactly_in_one_compilation(toy_arrays):
    x, y = toy_arrays
    # focal_gamma 1.25 gives this test a compile key of its own, so the count is exact.
    config = small_config(focal_gamma=1.25)
    clean = batches_from(x, y, config.steps)
    before = loop.compile_count()
    for k in (0, config.steps // 2, config.steps - 1):
        untouched = loop.train_on_batches(config, clean[:k], in_dim=DIM, n_heads=HEADS)
        for value in POISONS:
            batches = batches_from(x, y, config.steps)
            batches[k]["cls"][3, 5] = value
            seen = []
            with pytest.raises(NonFiniteError) as caught:
                loop.train_on_batches(
                    config, batches, in_dim=DIM, n_heads=HEADS, on_sync=seen.append
                )
            err = caught.value
            assert err.step == k, (k, value)
            assert MESSAGE_PATTERN.fullmatch(str(err))
            assert not (np.isfinite(err.loss) and np.isfinite(err.grad_norm))
            assert all(state.step <= k for state in seen)  # no sync hook past the bad step
            context = err.context
            assert context.step == k
            assert context.learning_rate == pytest.approx(float(make_schedule(config)(k)))
            poisoned = context.batch["cls"][3, 5]
            assert poisoned == value or (np.isnan(value) and np.isnan(poisoned))
            # The parameters handed back are exactly those from before the bad step.
            for got, want in zip(
                _leaves(context.params), _leaves(untouched.state.params), strict=True
            ):
                np.testing.assert_array_equal(got, want)
    assert loop.compile_count() - before == 1


def test_poisoned_row_on_the_fast_path_halts_where_it_is_first_drawn(toy_arrays):
    x, y = toy_arrays
    config = small_config(steps=16, chunk_steps=4, sync_every=8)
    poisoned_row = 41
    first_step = next(
        s for s in range(config.steps) if poisoned_row in loop.batch_rows(config, s, len(x))
    )
    x = x.copy()
    x[poisoned_row, 0] = np.inf
    synced, logged = [], []
    with pytest.raises(NonFiniteError) as caught:
        loop.train_arrays(
            config,
            x,
            y,
            on_sync=lambda s: synced.append(s.step),
            on_history=lambda first, v: logged.append((first, v["loss"])),
        )
    err = caught.value
    assert err.step == first_step
    context = err.context
    assert poisoned_row in context.row_indices
    assert not np.isfinite(context.batch["cls"]).all()
    assert all(np.isfinite(leaf).all() for leaf in _leaves(context.params))
    assert all(step <= first_step for step in synced)
    # The pre-step parameters are rebuilt by replay from the last sync: they equal those
    # of a clean run confirmed after every step (its own compile key: sync_every=1).
    clean = {}
    loop.train_arrays(
        small_config(steps=16, chunk_steps=4, sync_every=1),
        toy_arrays[0],
        y,
        on_sync=lambda s: clean.setdefault(s.step, s),
    )
    assert first_step == 0 or first_step in clean
    if first_step in clean:
        for got, want in zip(
            _leaves(context.params), _leaves(clean[first_step].params), strict=True
        ):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # Every step up to the bad one is reported (the bad one last, non-finite), none after.
    reported = np.concatenate([losses for _, losses in logged])
    assert [first for first, _ in logged] == list(range(0, first_step + 1, 8))[: len(logged)]
    assert reported.size == first_step + 1
    assert np.isfinite(reported[:-1]).all() and not np.isfinite(reported[-1])


def test_exploding_learning_rate_halts_with_finite_parameters(toy_arrays):
    x, y = toy_arrays
    config = small_config(peak_lr=1e30)
    with pytest.raises(NonFiniteError) as caught:
        loop.train_arrays(config, x, y)
    assert MESSAGE_PATTERN.fullmatch(str(caught.value))
    assert all(np.isfinite(leaf).all() for leaf in _leaves(caught.value.context.params))


@pytest.mark.parametrize("sync_every", [2, 4])
def test_an_overflowing_update_halts_at_its_own_step_and_never_reaches_a_hook(
    toy_arrays, sync_every
):
    # Step 0 has learning rate 0 (warmup); step 1's update, 3e38 x (direction + 10 x
    # weights), overflows float32 although its loss and gradient are finite. Whether the
    # next sync comes right after it (2) or after step 2's non-finite loss (4), the halt
    # is at step 1, the update's own step, with its finite values.
    x, y = toy_arrays
    config = small_config(
        peak_lr=3e38, warmup_steps=1, weight_decay=10.0, sync_every=sync_every, chunk_steps=2
    )
    synced = []
    with pytest.raises(NonFiniteError) as caught:
        loop.train_arrays(config, x, y, on_sync=synced.append)
    err = caught.value
    assert err.step == 1
    assert np.isfinite(err.loss) and np.isfinite(err.grad_norm)
    assert MESSAGE_PATTERN.fullmatch(str(err))
    assert all(np.isfinite(leaf).all() for leaf in _leaves(err.context.params))
    assert synced == []  # the only sync due (after step 1 or 3) never handed anything out


def test_without_the_guard_the_same_poison_silently_ruins_the_parameters(toy_arrays):
    # The control for the tests above: it is the guard that stops the run.
    x, y = toy_arrays
    config = small_config()
    batches = batches_from(x, y, config.steps)
    batches[2]["cls"][0, 0] = np.nan
    result = loop.train_on_batches(config, batches, in_dim=DIM, n_heads=HEADS, guard=False)
    assert not all(np.isfinite(leaf).all() for leaf in _leaves(result.state.params))


def test_clean_batches_never_raise(toy_arrays):
    x, y = toy_arrays
    config = small_config()
    result = loop.train_on_batches(
        config, batches_from(x, y, config.steps), in_dim=DIM, n_heads=HEADS
    )
    assert len(result.history) == config.steps
    assert np.isfinite(np.array(result.history)).all()


def test_the_halt_is_a_typed_error_with_its_context_declared(toy_arrays):
    x, y = toy_arrays
    config = small_config()
    batches = batches_from(x, y, config.steps)
    batches[1]["cls"][0, 0] = np.nan
    with pytest.raises(GuardHalt) as caught:
        loop.train_on_batches(config, batches, in_dim=DIM, n_heads=HEADS)
    assert isinstance(caught.value.context, loop.HaltContext)
    assert caught.value.postmortem is None  # the runner fills it when it writes a bundle


# Loaded with ``-p`` before anything compiles: the guard's per-step check ignores the
# gradient norm, and nothing checks the parameters (else the replay would still find the
# NaN update that the unchecked gradient norm let through).
LOSS_ONLY_GUARD = """
import numpy as np
import nozero.jax.guard
import nozero_trainer.loop

def first_bad_loss(values):
    finite = np.isfinite(values["loss"])
    return None if finite.all() else int(np.argmin(finite))

nozero.jax.guard.first_bad = first_bad_loss
nozero_trainer.loop._params = lambda carry: ()
"""

EXACT_STEP_TESTS = [
    "tests/trainer/test_guard.py::test_poison_at_first_middle_last_step_halts_exactly_in_one_compilation",
    "tests/jax/test_jax_guard.py::test_single_steps_halt_exactly_for_each_poison_and_an_overflow_in_one_compilation",
]


def test_a_guard_that_checks_only_the_loss_fails_the_contract_and_the_guard_tests(pytester):
    pytester.makepyfile(loss_only_guard=LOSS_ONLY_GUARD)
    mutated = ("-p", "loss_only_guard", "-p", "no:cacheprovider")
    contract = pytester.runpytest_subprocess(
        *mutated,
        "--nozero",
        "--nozero-examples=5",
        "--nozero-steps=3",
        "-k",
        "overflow",
        "--nozero-trainer=nozero_trainer.contract_target:reference_trainer",
        timeout=240,
    )
    contract.assert_outcomes(failed=1, deselected=3)
    contract.stdout.fnmatch_lines(["nozero check 'overflow' failed for trainer*", "*late*"])
    own = pytester.runpytest_subprocess(
        *mutated,
        f"--rootdir={REPO}",
        *(str(REPO / test) for test in EXACT_STEP_TESTS),
        timeout=240,
    )
    own.assert_outcomes(failed=2)
    # Both fail on their halts (late or missing), not on anything else.
    report = own.stdout.str()
    assert report.count("AssertionError") + report.count("DID NOT RAISE") >= 2, report
    assert "NameError" not in report and "ImportError" not in report
