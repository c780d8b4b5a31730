"""Post-mortem bundles and diagnoses on a small model whose failure modes are known."""

from __future__ import annotations

import json
import math

import jax.numpy as jnp
import numpy as np
import pytest

from nozero.contract import format_message
from nozero_trainer import postmortem as pm

HEADS = ["A", "B"]


def naive_logsumexp_loss(params, batch):
    """exp() overflows float32 past 88.7 but float64 only past 709: a precision failure."""
    logits = batch["x"] @ params["w"]
    per_head = jnp.log(jnp.mean(jnp.exp(logits), axis=0))
    return jnp.sum(per_head), {"terms": {"lse": per_head}, "stages": [("logits", logits)]}


def _params():
    return {"w": jnp.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], jnp.float32)}


def _write(tmp_path, batch, rows=(40, 41, 42, 43)):
    params = _params()
    replay = pm.replay_step(naive_logsumexp_loss, params, batch)
    return pm.write_bundle(
        tmp_path,
        step=12,
        loss=replay.loss,
        grad_norm=replay.grad_norm,
        learning_rate=3e-3,
        message=format_message(12, replay.loss, replay.grad_norm),
        batch=batch,
        row_indices=np.array(rows),
        params=params,
        opt_state=(jnp.zeros(()), {"mu": params}),
        replay=replay,
        config={"heads": HEADS, "seed": 0},
        heads=HEADS,
    ), replay


def _bundle(tmp_path, step, replay, params, batch, learning_rate, opt_state):
    """A bundle for ``replay`` of ``step``, with an empty run configuration."""
    return pm.write_bundle(
        tmp_path,
        step=step,
        loss=replay.loss,
        grad_norm=replay.grad_norm,
        learning_rate=learning_rate,
        message=format_message(step, replay.loss, replay.grad_norm),
        batch=batch,
        row_indices=np.arange(len(batch["x"])),
        params=params,
        opt_state=opt_state,
        replay=replay,
        config={},
        heads=HEADS,
    )


def _history(tmp_path, norms):
    with open(tmp_path / "metrics.jsonl", "w") as out:
        for step, norm in enumerate(norms):
            out.write(json.dumps({"step": step + 2, "loss": 1.0, "grad_norm": norm, "lr": 3e-3}))
            out.write("\n")
        out.write(json.dumps({"event": "eval", "step": 5, "pr_auc": {"A": 0.5}}) + "\n")
        out.write('{"step": 99, "lo')  # torn last line of a killed process


def test_overflow_that_float64_survives_is_called_a_precision_problem(tmp_path):
    batch = {"x": np.array([[0.0, 100.0, 0.0]] + [[0.1, 0.2, 0.3]] * 3, np.float32)}
    path, replay = _write(tmp_path, batch)
    assert replay.loss == float("inf")
    assert replay.nonfinite_stages == []  # logits are finite; the exp overflows later
    _history(tmp_path, [0.5, 0.6, 0.7])
    bundle = pm.read_bundle(path)
    assert bundle.halt["loss_terms"]["lse"]["B"] == float("inf")
    assert bundle.halt["loss_terms"]["lse"]["A"] < 1.0
    params = {"w": jnp.asarray(bundle.params["w"])}
    float64 = pm.replay_step(naive_logsumexp_loss, params, bundle.batch, float64=True)
    assert float64.dtype == "float64" and float64.finite
    text = pm.diagnose(bundle, float64)
    assert "inputs: every value of the batch is finite" in text
    assert "first non-finite loss term: 'lse', for heads B" in text
    assert "this is a precision problem" in text
    assert "the 10 logged steps" not in text and "the 3 logged steps before the halt" in text


def test_nonfinite_inputs_are_listed_by_row_and_column(tmp_path):
    x = np.full((4, 3), 0.1, np.float32)
    x[2, 1] = np.nan
    x[3, 0] = -np.inf
    path, replay = _write(tmp_path, {"x": x})
    assert replay.nonfinite_stages == ["logits"]
    assert sorted(replay.nonfinite_grad_leaves) == ["w"]
    bundle = pm.read_bundle(path)
    np.testing.assert_array_equal(bundle.row_indices, [40, 41, 42, 43])
    float64 = pm.replay_step(naive_logsumexp_loss, _params(), bundle.batch, float64=True)
    text = pm.diagnose(bundle, float64)
    assert "inputs: 2 of 4 batch rows hold NaN/Inf" in text
    assert "field 'x': batch row 2 (data row 42), columns 1" in text
    assert "field 'x': batch row 3 (data row 43), columns 0" in text
    assert "first non-finite stage of the forward pass: logits" in text
    assert "non-finite gradients in 1 of 1 parameter leaves" in text
    assert "not a precision problem; the cause is the inputs themselves" in text
    assert "no logged steps before the halt" in text


def test_steep_gradient_growth_is_called_divergence(tmp_path):
    batch = {"x": np.array([[0.0, 100.0, 0.0]] + [[0.1, 0.2, 0.3]] * 3, np.float32)}
    path, _ = _write(tmp_path, batch)
    _history(tmp_path, [1.0, 3.0, 40.0, 900.0])
    text = pm.diagnose(pm.read_bundle(path), None)
    assert "the gradient norm grew steeply before the halt" in text
    assert "float64 re-run: not run" in text


def test_bundles_are_numbered_and_found_from_the_run_dir(tmp_path):
    batch = {"x": np.ones((4, 3), np.float32)}
    first, _ = _write(tmp_path, batch)
    second, _ = _write(tmp_path, batch)
    assert first.name == "halt-01-step-00000012" and second.name == "halt-02-step-00000012"
    assert pm.find_bundles(tmp_path) == [first, second]
    assert pm.find_bundles(first) == [first]
    assert not list((tmp_path / "postmortem").glob(".tmp-*"))


def test_reading_a_directory_that_is_no_bundle_names_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"halt\.json: not a post-mortem bundle"):
        pm.read_bundle(tmp_path)


def _trainer_replay(scale, poison=None, float64=False):
    import jax

    from nozero_trainer.config import TrainConfig
    from nozero_trainer.model import init_params

    config = TrainConfig(hidden_dims=(4,), heads=("A", "B", "C"), focal_gamma=0.5)
    params = init_params(jax.random.PRNGKey(0), 6, config.hidden_dims, 3)
    params = jax.tree_util.tree_map(lambda p: p * scale, params)
    rng = np.random.default_rng(0)
    batch = {
        "cls": rng.normal(size=(5, 6)).astype(np.float32),
        "labels": (rng.random((5, 3)) < 0.5).astype(np.float32),
    }
    if poison is not None:
        batch["cls"][poison] = np.nan
    loss = pm.trainer_loss_with_aux(config, np.ones(3, np.float32), np.ones(3, np.float32))
    return pm.replay_step(loss, params, batch, float64=float64)


def test_trainer_replay_finds_the_first_bad_layer_and_per_head_terms():
    clean = _trainer_replay(1.0)
    assert clean.finite and clean.nonfinite_stages == [] and clean.nonfinite_grad_leaves == []
    assert set(clean.terms) == {"bce", "rce", "focal_mean_weight", "weighted per-head loss"}
    assert all(len(v) == 3 for v in clean.terms.values())
    poisoned = _trainer_replay(1.0, poison=(2, 3))
    assert poisoned.nonfinite_stages == ["layer 0 output", "logits"]
    assert not poisoned.finite
    assert sorted(poisoned.nonfinite_grad_leaves) == ["0/b", "0/w", "1/b", "1/w"]


def test_trainer_replay_in_float64_survives_a_float32_overflow():
    huge = _trainer_replay(1e25)  # activations reach ~1e50: past float32's ~3.4e38
    assert not huge.finite and "layer 0 output" not in huge.nonfinite_stages
    wide = _trainer_replay(1e25, float64=True)
    assert wide.dtype == "float64" and wide.finite


def test_replaying_the_update_finds_an_overflowing_step_with_finite_gradients(tmp_path):
    import optax

    params = _params()
    batch = {"x": np.full((4, 3), 0.1, np.float32)}
    optimizer = optax.sgd(1e37)
    replay = pm.replay_step(
        naive_logsumexp_loss, params, batch, optimizer=optimizer, opt_state=optimizer.init(params)
    )
    assert math.isfinite(replay.loss) and math.isfinite(replay.grad_norm)
    assert replay.update_norm == float("inf") and not replay.finite
    path = _bundle(tmp_path, 3, replay, params, batch, 1e37, optimizer.init(params))
    wide = pm.replay_step(
        naive_logsumexp_loss, params, batch, True, optimizer, optimizer.init(params)
    )
    assert wide.finite
    text = pm.diagnose(pm.read_bundle(path), wide)
    assert "gradients: finite in all 1 parameter leaves" in text
    assert "but its norm overflows float32" in text
    assert "the run diverged (learning rate too high)" in text
    assert "precision problem (float32" not in text


def test_non_finite_parameters_before_the_step_are_named(tmp_path):
    params = {"w": _params()["w"].at[2, 0].set(jnp.inf)}
    batch = {"x": np.full((4, 3), 0.1, np.float32)}
    replay = pm.replay_step(naive_logsumexp_loss, params, batch)
    path = _bundle(tmp_path, 5, replay, params, batch, 0.1, ())
    text = pm.diagnose(pm.read_bundle(path), None)
    assert "parameters before the step: NaN/Inf in w (an earlier update overflowed" in text


def test_a_deterministic_step_repeats_bit_for_bit_and_the_diagnosis_says_so(tmp_path):
    batch = {"x": np.array([[0.0, 100.0, 0.0]] + [[0.1, 0.2, 0.3]] * 3, np.float32)}
    repeat = pm.repeat_step(naive_logsumexp_loss, _params(), batch)
    assert repeat.identical and repeat.differing == []
    assert repeat.compared == 4  # loss, one term, one stage, one gradient leaf
    path, _ = _write(tmp_path, batch)
    text = pm.diagnose(pm.read_bundle(path), None, repeat)
    assert "in all 4 outputs: the computation is deterministic" in text
    assert "the float32 re-run fails as the run did: the failure repeats" in text
    assert "not deterministic" not in text


def test_a_step_whose_bits_change_between_runs_is_called_not_deterministic(tmp_path):
    import jax

    calls = iter(range(1, 100))

    def drifting_loss(params, batch):
        # A host value that changes on every run stands in for a non-deterministic kernel.
        noise = jax.pure_callback(
            lambda: np.float32(next(calls) * 1e-7), jax.ShapeDtypeStruct((), jnp.float32)
        )
        loss, aux = naive_logsumexp_loss(params, batch)
        return loss + noise, aux

    batch = {"x": np.full((4, 3), 0.1, np.float32)}
    repeat = pm.repeat_step(drifting_loss, _params(), batch)
    assert not repeat.identical and repeat.differing == ["loss"]
    path, _ = _write(tmp_path, batch)
    text = pm.diagnose(pm.read_bundle(path), None, repeat)
    assert "the results DIFFER\n  in 1 of 4 outputs (loss)" in text
    assert "the computation is not deterministic: suspect the hardware or a" in text


def test_a_finite_float32_replay_of_a_failed_step_is_reported_as_not_repeating(tmp_path):
    batch = {"x": np.full((4, 3), 0.1, np.float32)}  # finite in float32
    path, replay = _write(tmp_path, batch)
    halt_file = path / "halt.json"
    halt = json.loads(halt_file.read_text())
    halt["loss"], halt["nonfinite"] = None, {"loss": "nan"}  # the run itself saw a NaN
    halt_file.write_text(json.dumps(halt))
    text = pm.diagnose(pm.read_bundle(path), None)
    assert "the float32 re-run of the step is finite, although the run's step was not" in text
