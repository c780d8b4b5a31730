"""The model's shapes and init, and the synthetic data generator's promises."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest

from nozero_trainer.data import load_split
from nozero_trainer.heads import DEFAULT_HEADS
from nozero_trainer.model import NARROW_LAYER, apply_model, init_params, matmul_transposed_grad
from nozero_trainer.synthetic import make_data


def test_mlp_and_linear_heads():
    key = jax.random.PRNGKey(0)
    mlp = init_params(key, 32, (16, 8), 5)
    assert [layer["w"].shape for layer in mlp] == [(32, 16), (16, 8), (8, 5)]
    linear = init_params(key, 32, (), 5)
    assert len(linear) == 1
    x = np.ones((4, 32), np.float32)
    assert apply_model(mlp, x).shape == (4, 5)
    np.testing.assert_allclose(apply_model(linear, x), x @ linear[0]["w"], rtol=1e-5)


@pytest.mark.parametrize("fan_out", [NARROW_LAYER // 2, NARROW_LAYER * 4])
def test_transposed_weight_gradient_matches_autodiff(fan_out):
    # Both of its branches (a narrow layer's, a wide layer's) must give the gradients
    # that autodiff gives for a plain ``x @ w``.
    kx, kw = jax.random.split(jax.random.PRNGKey(1))
    x = jax.random.normal(kx, (24, 40))
    w = jax.random.normal(kw, (40, fan_out))

    def loss(matmul):
        return lambda x, w: jnp.sum(jnp.sin(matmul(x, w)))

    want = jax.grad(loss(jnp.matmul), argnums=(0, 1))(x, w)
    got = jax.grad(loss(matmul_transposed_grad), argnums=(0, 1))(x, w)
    for g, wanted in zip(got, want, strict=True):
        np.testing.assert_allclose(g, wanted, rtol=1e-5, atol=1e-5)


def test_init_is_seeded_and_truncated():
    a = init_params(jax.random.PRNGKey(3), 256, (128,), 4)
    b = init_params(jax.random.PRNGKey(3), 256, (128,), 4)
    c = init_params(jax.random.PRNGKey(4), 256, (128,), 4)
    np.testing.assert_array_equal(a[0]["w"], b[0]["w"])
    assert not np.array_equal(a[0]["w"], c[0]["w"])
    w = np.asarray(a[0]["w"])
    std = np.sqrt(1 / 256)  # fan-in scaling: the truncated draw keeps this variance
    scale = std / 0.87962566  # the untruncated normal's scale that yields it
    assert np.abs(w).max() <= 2 * scale + 1e-6  # truncated at two scales
    assert 0.95 * std < w.std() < 1.05 * std


def test_make_data_schema_shares_and_signal(tmp_path):
    out = make_data(tmp_path / "d", rows=4000, dim=24, seed=1, shards=3)
    assert sorted(p.name for p in out.iterdir()) == ["holdout", "train"]
    assert len(list((out / "train").glob("*.parquet"))) == 3
    schema = pq.read_schema(next((out / "train").glob("*.parquet")))
    assert [str(t) for t in schema.types] == [
        "int64",
        "list<element: float>",
        "list<element: string>",
        "string",
        "string",
    ]
    split = load_split(out / "train")
    read = split.stats.rows_read
    assert 0.05 < split.stats.non_strong_dropped / read < 0.15
    assert 0.003 < split.stats.non_finite_dropped / read < 0.03
    rates = split.labels.mean(axis=0)
    assert rates[DEFAULT_HEADS.index("RTBot")] < 0.03 < rates.min(initial=1, where=rates > 0.03)
    assert (split.labels.sum(axis=1) >= 1).all()  # every kept row has a head, legit included
    # The signal: a head's positives lean along one direction, so their mean differs.
    head = DEFAULT_HEADS.index("FollowBot")
    pos, neg = split.cls[split.labels[:, head] == 1], split.cls[split.labels[:, head] == 0]
    assert np.linalg.norm(pos.mean(0) - neg.mean(0)) > 1.0


def test_make_data_refuses_a_non_empty_directory_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "d"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        make_data(target, rows=100, dim=4)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    with pytest.raises(ValueError, match="rows >= 10"):
        make_data(tmp_path / "e", rows=3, dim=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # no temporary left over
