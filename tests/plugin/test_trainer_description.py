"""TrainerUnderTest's helpers and how a run's return value is read: from_example,
count_traces, returned models and params, and torch tensors without importing torch."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nozero.plugin.outcome import read_returned
from nozero.testing import FieldRange, TrainerUnderTest, count_traces


def _example() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((6, 3)).astype(np.float32),
        "mask": (np.arange(4) <= np.arange(6)[:, None] % 4).astype(np.float32),  # 1-4 ones
        "tokens": rng.integers(0, 50, size=(6, 4)),
    }


def test_from_example_reads_the_spec_and_keeps_rows_valid():
    example = _example()
    trainer = TrainerUnderTest.from_example(example, lambda batches: None)
    assert trainer.batch_spec["tokens"] == ((6, 4), np.dtype(np.int64))
    assert trainer.vary_fields == ("x",)  # the 0/1 mask is not rescaled or zeroed
    for batch in trainer.clean_batches(seed=3, steps=2):
        rows = {tuple(row) for row in example["tokens"]}
        assert {tuple(row) for row in batch["tokens"]} == rows  # the rows, shuffled
        assert (np.count_nonzero(batch["mask"], axis=1) > 0).all()


def test_steps_per_update_multiplies_the_batches_and_is_validated():
    trainer = TrainerUnderTest.from_example(_example(), lambda b: None, steps_per_update=3)
    assert len(trainer.clean_batches(seed=0, steps=2)) == 6
    with pytest.raises(ValueError, match="steps_per_update must be >= 1"):
        TrainerUnderTest.from_example(_example(), lambda b: None, steps_per_update=0)
    with pytest.raises(TypeError, match=r"field_ranges\['x'\] must be a FieldRange"):
        TrainerUnderTest.from_example(_example(), lambda b: None, field_ranges={"x": 3.0})
    kept = TrainerUnderTest.from_example(
        _example(), lambda b: None, field_ranges={"x": FieldRange(max_magnitude=5.0)}
    )
    assert kept.field_ranges["x"].max_magnitude == 5.0


def test_count_traces_reads_the_jit_cache_of_jax_and_equinox_functions():
    import equinox as eqx

    plain = jax.jit(lambda x: x * 2)
    filtered = eqx.filter_jit(lambda x: x + 1)
    compiles = count_traces(plain, filtered)
    assert compiles() == 0
    plain(jnp.ones(2))
    plain(jnp.ones(2))
    filtered(jnp.ones(2))
    assert compiles() == 2
    plain(jnp.ones(3))  # a new shape: a new compilation
    assert compiles() == 3
    unreadable = count_traces(lambda x: x)  # reported by the plugin, not raised here
    assert "is not a jitted function" in unreadable.problem
    with pytest.raises(TypeError, match="is not a jitted function"):
        unreadable()


def test_returned_models_and_params_have_their_float_arrays_checked():
    import equinox as eqx

    model = eqx.nn.MLP(2, 1, 4, 1, key=jax.random.key(0))
    fine = read_returned(model)
    assert fine.state_type == "MLP" and fine.state_arrays == 4 and fine.bad_array is None
    broken = eqx.tree_at(lambda m: m.layers[0].bias, model, jnp.full(4, jnp.nan))
    assert read_returned(broken).bad_array == ".layers[0].bias holds 4 non-finite values of 4"
    params = {"dense": {"w": np.ones((2, 2)), "b": np.array([0.0, np.inf])}, "step": 3}
    assert read_returned(params).bad_array == "['dense']['b'] holds 1 non-finite values of 2"
    history = read_returned([(jnp.float32(0.5), 1.0), (0.25, np.float64(2.0))])
    assert history.history.entries == ((0.5, 1.0), (0.25, 2.0))
    assert read_returned(None).returned_nothing
    assert "holding no float arrays" in read_returned("done").malformed


def test_check_finite_does_not_import_torch():
    code = (
        "import sys, numpy, nozero\n"
        "nozero.check_finite(0, numpy.float32(1.0), 2.0)\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_check_finite_accepts_torch_tensors_that_require_grad_quietly():
    torch = pytest.importorskip("torch", reason="torch is not in the test extra (2.7 GB)")
    import warnings

    import nozero

    loss = torch.tensor(1.5, requires_grad=True) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nozero.check_finite(0, loss, torch.tensor(2.0))
        with pytest.raises(nozero.NonFiniteError, match="loss=nan"):
            nozero.check_finite(1, loss * float("nan"), torch.tensor(2.0))
    model = torch.nn.Linear(2, 1)
    assert read_returned(model).state_arrays == 2


def test_typed_prng_keys_are_skipped_and_user_histories_are_read():
    from flax import nnx

    model = nnx.Sequential(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Dropout(0.5, rngs=nnx.Rngs(1)))
    read = read_returned(model)  # the Dropout's key and counter are not float arrays
    assert read.state_arrays == 2 and read.bad_array is None
    assert read.describe() == "returned normally: a Sequential whose 2 float arrays are all finite"
    dicts = read_returned([{"loss": jnp.float32(0.5), "grad_norm": 1.0}, {"loss": 0.25}])
    assert dicts.history.entries == ((0.5, 1.0), (0.25, None))
    columns = read_returned({"train_loss": [0.5, float("nan")], "grad_norm": np.ones(2)})
    assert columns.history.entries[1][1] == 1.0 and columns.first_non_finite()[0] == 1
    # a parameter named like a loss is not a history
    state = read_returned({"loss_head.bias": np.zeros(1), "w": np.ones(2)})
    assert state.history is None and state.state_arrays == 2


def test_articles_follow_the_sound_of_the_type_name():
    import equinox as eqx

    mlp = eqx.nn.MLP(2, 1, 4, 1, key=jax.random.key(0))
    assert read_returned(mlp).describe().startswith("returned normally: an MLP whose")
    assert "run returned an int holding no float arrays" in read_returned(3).malformed
