"""Checkpoints: round trip, atomic latest pointer, and refusal of damaged or foreign files."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import optax
import pytest

from nozero._atomic import atomic_output
from nozero_trainer import checkpoint as ckpt
from nozero_trainer.model import init_params
from nozero_trainer.pytree_npz import read_npz
from nozero_trainer.run_config import normalise_config

CONFIG = {"data": "/data", "shards": {"train/a.parquet": 123}, "heads": ["A", "B"], "seed": 3}
CONFIG["hidden_dims"] = [4]


def _state(hidden=(4,), heads=2, seed=0):
    params = init_params(jax.random.PRNGKey(seed), 6, hidden, heads)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))
    opt_state = optimizer.init(params)
    grads = jax.tree_util.tree_map(lambda p: p * 0.5 + 0.1, params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, optimizer


def _assert_trees_equal(a, b):
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_restores_params_and_optax_state(tmp_path):
    params, opt_state, optimizer = _state()
    path = ckpt.save_checkpoint(tmp_path, 7, params, opt_state, CONFIG, state={"lr_scale": 0.5})
    assert ckpt.latest_checkpoint(tmp_path) == path
    template_params, _, _ = _state(seed=1)
    loaded = ckpt.load_checkpoint(path, template_params, optimizer.init(template_params))
    assert loaded.step == 7
    assert loaded.state == {"lr_scale": 0.5}
    assert loaded.config == normalise_config(CONFIG)
    _assert_trees_equal(loaded.params, params)
    _assert_trees_equal(loaded.opt_state, opt_state)
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["arrays"]["params.npz"]) == {"0/w", "0/b", "1/w", "1/b"}
    assert "1/0/mu/0/w" in manifest["arrays"]["opt_state.npz"]


def test_npz_files_load_without_pickle(tmp_path):
    params, opt_state, _ = _state()
    path = ckpt.save_checkpoint(tmp_path, 1, params, opt_state, CONFIG)
    for name in ("params.npz", "opt_state.npz"):
        with np.load(path / name, allow_pickle=False) as data:
            assert all(data[key].dtype != object for key in data.files)


def test_latest_moves_and_old_checkpoints_are_pruned(tmp_path):
    params, opt_state, _ = _state()
    paths = [ckpt.save_checkpoint(tmp_path, s, params, opt_state, CONFIG, keep=2) for s in range(4)]
    assert ckpt.latest_checkpoint(tmp_path) == paths[-1]
    remaining = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert remaining == sorted([paths[2].name, paths[3].name, "latest"])


def test_no_checkpoint_means_none(tmp_path):
    assert ckpt.latest_checkpoint(tmp_path) is None


def test_interrupted_save_leaves_latest_on_the_previous_checkpoint(tmp_path, monkeypatch):
    params, opt_state, _ = _state()
    first = ckpt.save_checkpoint(tmp_path, 1, params, opt_state, CONFIG)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "write_npz", dies)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, 2, params, opt_state, CONFIG)
    assert ckpt.latest_checkpoint(tmp_path) == first
    assert [p.name for p in (tmp_path / "checkpoints").glob(".tmp-*")] == []
    ckpt.verify_checkpoint(first)


def _saved(tmp_path):
    params, opt_state, optimizer = _state()
    path = ckpt.save_checkpoint(tmp_path, 5, params, opt_state, CONFIG)
    return path, params, optimizer


def _snapshot(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_truncated_npz_names_the_file_and_changes_nothing(tmp_path):
    path, params, optimizer = _saved(tmp_path)
    target = path / "params.npz"
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    before = _snapshot(path)
    with pytest.raises(ckpt.CheckpointError, match=r"params\.npz: unreadable or truncated"):
        ckpt.load_checkpoint(path, params, optimizer.init(params))
    with pytest.raises(ckpt.CheckpointError, match=r"params\.npz"):
        ckpt.verify_checkpoint(path)
    assert _snapshot(path) == before


def test_sha256_mismatch_names_file_and_array(tmp_path):
    path, params, optimizer = _saved(tmp_path)
    arrays = read_npz(path / "opt_state.npz")
    arrays["1/0/nu/1/b"] = arrays["1/0/nu/1/b"] + 1.0  # same shape, other bytes
    np.savez(path / "opt_state.npz", **arrays)
    with pytest.raises(ckpt.CheckpointError, match=r"opt_state\.npz: array '1/0/nu/1/b' fails"):
        ckpt.load_checkpoint(path, params, optimizer.init(params))


def test_edited_config_fails_its_sha256(tmp_path):
    path, params, optimizer = _saved(tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["seed"] = 4
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ckpt.CheckpointError, match=r"config\.json: fails its sha256"):
        ckpt.verify_checkpoint(path)


def test_missing_manifest_is_named(tmp_path):
    path, params, optimizer = _saved(tmp_path)
    os.remove(path / "manifest.json")
    with pytest.raises(ckpt.CheckpointError, match=r"manifest\.json: file is missing"):
        ckpt.load_checkpoint(path, params, optimizer.init(params))


def test_other_hidden_widths_are_refused_by_setting_and_by_shape(tmp_path):
    path, _, _ = _saved(tmp_path)
    other, _, optimizer = _state(hidden=(5,))
    with pytest.raises(ckpt.CheckpointError, match=r"hidden_dims: run directory has \[4\]"):
        ckpt.load_checkpoint(path, other, optimizer.init(other), expect={"hidden_dims": [5]})
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"params\.npz: does not match the model: .*"
        r"array '0/w' is float32\[6, 4\], the model needs float32\[6, 5\]",
    ):
        ckpt.load_checkpoint(path, other, optimizer.init(other))


def test_other_head_registry_is_refused(tmp_path):
    path, _, _ = _saved(tmp_path)
    other, _, optimizer = _state(heads=3)
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"config\.json: .*heads: run directory has "
        r"\['A', 'B'\], model has \['A', 'B', 'C'\]",
    ):
        ckpt.load_checkpoint(path, other, optimizer.init(other), expect={"heads": ["A", "B", "C"]})


def test_other_depth_names_missing_arrays(tmp_path):
    path, _, _ = _saved(tmp_path)
    other, _, optimizer = _state(hidden=(4, 4))
    with pytest.raises(ckpt.CheckpointError, match=r"missing array '2/w'"):
        ckpt.load_checkpoint(path, other, optimizer.init(other))


def test_dangling_latest_pointer_is_an_error(tmp_path):
    path, _, _ = _saved(tmp_path)
    (path.parent / "latest").write_text("step-99999999-000000\n")
    with pytest.raises(ckpt.CheckpointError, match=r"latest: names 'step-99999999-000000'"):
        ckpt.latest_checkpoint(tmp_path)


def test_config_differences_name_each_setting():
    saved = {"seed": 1, "hidden_dims": [512, 256], "peak_lr": 1e-3, "out": "a"}
    current = {"seed": 2, "hidden_dims": (512, 256), "peak_lr": 2e-3, "out": "b"}
    assert ckpt.config_differences(saved, current, ignore=("out",)) == [
        "peak_lr: run directory has 0.001, command line has 0.002",
        "seed: run directory has 1, command line has 2",
    ]


def test_atomic_output_keeps_the_old_file_on_error(tmp_path):
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_non_finite_values_are_never_checkpointed(tmp_path):
    params, opt_state, _ = _state()
    good = ckpt.save_checkpoint(tmp_path, 1, params, opt_state, CONFIG)
    params[1]["b"] = params[1]["b"].at[0].set(np.inf)
    with pytest.raises(ckpt.CheckpointError, match=r"step 2: params leaves \['1/b'\]"):
        ckpt.save_checkpoint(tmp_path, 2, params, opt_state, CONFIG)
    assert ckpt.latest_checkpoint(tmp_path) == good
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", good.name]
