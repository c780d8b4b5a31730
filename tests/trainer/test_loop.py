"""The engine: batch order, resume, sync hooks, both entry points, compilation reuse."""

from __future__ import annotations

import numpy as np
import pytest

from nozero_trainer import loop

from .conftest import DIM, HEADS, small_config


def _leaves(params) -> list[np.ndarray]:
    return [np.asarray(a) for layer in params for a in (layer["w"], layer["b"])]


def test_batch_order_is_a_pure_function_of_seed_and_step():
    config = small_config(batch_size=8)
    epoch = np.concatenate([loop.batch_rows(config, s, 40) for s in range(5)])
    assert sorted(epoch.tolist()) == list(range(40))  # each row once per epoch
    again = np.concatenate([loop.batch_rows(config, s, 40) for s in range(5)])
    np.testing.assert_array_equal(epoch, again)
    next_epoch = np.concatenate([loop.batch_rows(config, s, 40) for s in range(5, 10)])
    assert not np.array_equal(epoch, next_epoch)
    other_seed = small_config(batch_size=8, seed=1)
    assert not np.array_equal(loop.batch_rows(other_seed, 0, 40), loop.batch_rows(config, 0, 40))


def test_fast_path_learns_and_syncs_on_schedule(toy_arrays):
    x, y = toy_arrays
    config = small_config(steps=48, chunk_steps=8, sync_every=16)
    synced = []
    result = loop.train_arrays(config, x, y, on_sync=lambda s: synced.append(s.step))
    assert synced == [16, 32, 48]
    assert result.state.step == 48 and len(result.history) == 48
    losses = result.steps["loss"]
    assert np.isfinite(losses).all()
    assert losses[-8:].mean() < losses[:8].mean()
    assert set(result.steps) == set(loop.STEP_FIELDS)


def test_resume_matches_an_uninterrupted_run(toy_arrays):
    x, y = toy_arrays
    config = small_config(steps=16, sync_every=4, chunk_steps=4)
    states = {}
    full = loop.train_arrays(config, x, y, on_sync=lambda s: states.setdefault(s.step, s))
    resumed = loop.train_arrays(config, x, y, state=states[8])
    assert resumed.start_step == 8 and resumed.state.step == 16
    for got, want in zip(_leaves(resumed.state.params), _leaves(full.state.params), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(resumed.steps["loss"], full.steps["loss"][8:], rtol=1e-6)


def test_resume_from_a_step_between_chunk_boundaries(toy_arrays):
    x, y = toy_arrays
    config = small_config(steps=12, sync_every=3, chunk_steps=4)  # syncs at 3, 6, 9, 12
    states = {}
    full = loop.train_arrays(config, x, y, on_sync=lambda s: states.setdefault(s.step, s))
    assert sorted(states) == [3, 6, 9, 12]
    resumed = loop.train_arrays(config, x, y, state=states[3])
    for got, want in zip(_leaves(resumed.state.params), _leaves(full.state.params), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_resume_on_batches_matches(toy_arrays):
    x, y = toy_arrays
    config = small_config()
    batches = [
        {
            "cls": x[loop.batch_rows(config, s, len(x))],
            "labels": y[loop.batch_rows(config, s, len(x))],
        }
        for s in range(config.steps)
    ]
    states = {}
    full = loop.train_on_batches(
        config, batches, in_dim=DIM, n_heads=HEADS, on_sync=lambda s: states.setdefault(s.step, s)
    )
    assert sorted(states) == [4, 8, 12]
    resumed = loop.train_on_batches(config, batches[4:], in_dim=DIM, n_heads=HEADS, state=states[4])
    for got, want in zip(_leaves(resumed.state.params), _leaves(full.state.params), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # The scan fast path and one-step-per-batch path compute the same training.
    fast = loop.train_arrays(config, x, y)
    for got, want in zip(_leaves(fast.state.params), _leaves(full.state.params), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_same_config_and_shapes_reuse_the_compiled_step(toy_arrays):
    x, y = toy_arrays
    config = small_config()
    loop.train_arrays(config, x, y)
    before = loop.compile_count()
    loop.train_arrays(small_config(seed=7), x, y)  # the seed is host-side only
    loop.train_arrays(config, x * 2, y)
    assert loop.compile_count() == before


def test_class_counts_weight_heads_and_bad_batches_are_refused(toy_arrays):
    x, y = toy_arrays
    config = small_config(steps=4, chunk_steps=4, sync_every=4)
    batches = [{"cls": x[:8], "labels": y[:8]}] * 4
    plain = loop.train_on_batches(config, batches, in_dim=DIM, n_heads=HEADS)
    weighted = loop.train_on_batches(
        config, batches, in_dim=DIM, n_heads=HEADS, class_counts=y.sum(0) + 1, n_rows=len(y)
    )
    assert plain.history[0][0] != pytest.approx(weighted.history[0][0])
    with pytest.raises(ValueError, match="step 1: 'cls' has shape"):
        loop.train_on_batches(
            config, [batches[0], {"cls": x[:8, :3], "labels": y[:8]}], in_dim=DIM, n_heads=HEADS
        )
    with pytest.raises(ValueError, match="lacks field 'labels'"):
        loop.train_on_batches(config, [{"cls": x[:8]}], in_dim=DIM, n_heads=HEADS)
