"""Evaluation, checkpoints, resume and holdout scores of real training runs (in process)."""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nozero._atomic import atomic_write_text
from nozero_trainer import checkpoint as ckpt
from nozero_trainer.config import RunOptions, TrainConfig
from nozero_trainer.data import load_split
from nozero_trainer.evaluation import predict
from nozero_trainer.runner import run_training
from nozero_trainer.synthetic import make_data

from .helpers import TINY

CONFIG = TrainConfig(**TINY)


def _run(data_dir, out_dir, config=CONFIG, **options):
    return run_training(
        config, data_dir, out_dir, stream=io.StringIO(), options=RunOptions(**options)
    )


def _events(run_dir, kind):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event") == kind]


def _assert_params_close(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def finished(data_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("finished")
    return run_dir, _run(data_dir, run_dir, holdout_scores_out=run_dir / "scores.parquet")


def test_evaluates_every_eval_every_steps_and_at_the_end(finished):
    run_dir, summary = finished
    evals = _events(run_dir, "eval")
    assert [e["step"] for e in evals] == [50, 100, 150, 200]
    heads = list(CONFIG.heads)
    for event in evals:
        assert list(event["pr_auc"]) == heads and list(event["positives"]) == heads
        assert all(0 < v <= 1 for v in event["pr_auc"].values())
    assert evals[-1]["pr_auc"] == pytest.approx(summary.evaluation.pr_auc)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"


def test_checkpoints_at_evaluations_latest_is_the_end_and_verifies(finished, data_dir):
    run_dir, summary = finished
    latest = ckpt.latest_checkpoint(run_dir)
    manifest = ckpt.verify_checkpoint(latest)
    assert manifest["step"] == 200
    steps = sorted(ckpt.read_manifest(p)["step"] for p in (run_dir / "checkpoints").glob("step-*"))
    assert steps == [100, 150, 200]  # the three newest are kept
    config = json.loads((latest / "config.json").read_text())
    assert config["seed"] == 0 and config["heads"] == list(CONFIG.heads)
    assert config["data_dir"] == str(data_dir.resolve())
    assert [name for name, _ in config["shards"]["train"]] == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    assert all(size > 0 for _, size in config["shards"]["train"] + config["shards"]["holdout"])
    restored = ckpt.load_checkpoint(latest, summary.state.params, summary.state.opt_state)
    _assert_params_close(restored.params, summary.state.params)


def test_holdout_scores_file(finished, data_dir):
    run_dir, summary = finished
    table = pq.read_table(run_dir / "scores.parquet")
    assert table.column_names[:4] == ["user_id", "labels", "label_source", "label_strength"]
    assert table.column_names[4:] == [f"score_{h}" for h in CONFIG.heads]
    split = load_split(data_dir / "holdout", CONFIG.heads)
    np.testing.assert_array_equal(table["user_id"].to_numpy(), split.user_id)
    scores = np.stack([table[f"score_{h}"].to_numpy() for h in CONFIG.heads], axis=1)
    np.testing.assert_allclose(scores, predict(summary.state.params, split.cls), rtol=1e-6)


def test_resume_from_a_middle_checkpoint_ends_like_an_uninterrupted_run(
    finished, data_dir, tmp_path
):
    _, uninterrupted = finished
    run_dir = tmp_path / "run"
    _run(data_dir, run_dir)
    # As if the process died right after the step-100 checkpoint: later ones never happened.
    checkpoints = sorted((run_dir / "checkpoints").glob("step-*"))
    middle = next(p for p in checkpoints if ckpt.read_manifest(p)["step"] == 100)
    for later in checkpoints:
        if later != middle:
            shutil.rmtree(later)
    atomic_write_text(run_dir / "checkpoints" / "latest", middle.name + "\n")
    resumed = _run(data_dir, run_dir, resume=True)
    assert resumed.resumed_from == 100 and resumed.state.step == 200
    _assert_params_close(resumed.state.params, uninterrupted.state.params)
    assert [e["step"] for e in _events(run_dir, "resume")] == [100]


def _refuse_constant(name):
    raise AssertionError(f"bare {name} in a file that must be strict JSON")


def strict_load(text):
    """``json.loads`` that rejects NaN and Infinity, as ``JSON.parse`` and ``jq`` do."""
    return json.loads(text, parse_constant=_refuse_constant)


def test_a_head_without_holdout_positives_gets_null_and_the_reason(data_dir, tmp_path):
    data = make_data(tmp_path / "data", 3000, 16, 0, shards=2)
    for shard in (data / "holdout").glob("*.parquet"):  # no RTBot left in the holdout
        table = pq.read_table(shard)
        labels = [[x for x in row if x != "RTBot"] for row in table["labels"].to_pylist()]
        index = table.column_names.index("labels")
        table = table.set_column(index, "labels", pa.array(labels, pa.list_(pa.string())))
        pq.write_table(table, shard)
    run = tmp_path / "run"
    summary = _run(data, run, TrainConfig(**{**TINY, "steps": 50}))
    assert summary.evaluation.pr_auc["RTBot"] is None
    events = [strict_load(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    event = [e for e in events if e["event"] == "eval"][-1]
    assert event["pr_auc"]["RTBot"] is None and event["positives"]["RTBot"] == 0
    assert "no positives" in event["pr_auc_undefined"]["RTBot"]
    assert isinstance(event["pr_auc"]["FollowBot"], float)
    status = strict_load((run / "status.json").read_text())
    assert status["pr_auc"]["RTBot"] is None and "RTBot" in status["pr_auc_undefined"]


def test_a_halted_run_writes_strict_json_with_the_nonfinite_values_named(data_dir, tmp_path):
    from nozero import NonFiniteError
    from nozero_trainer.runlog import read_metrics

    run = tmp_path / "run"
    with pytest.raises(NonFiniteError):
        _run(data_dir, run, TrainConfig(**{**TINY, "steps": 50, "peak_lr": 1e30}))
    lines = (run / "metrics.jsonl").read_text().splitlines()
    events = [strict_load(line) for line in lines]
    [halt] = [e for e in events if e["event"] == "halt"]
    assert halt["loss"] is None or isinstance(halt["loss"], float)
    named = {**halt.get("nonfinite", {})}
    assert named and set(named.values()) <= {"nan", "inf", "-inf"}
    assert all(halt[key] is None for key in named)
    status = strict_load((run / "status.json").read_text())
    assert status["status"] == "halted" and status["nonfinite"] == named
    # Read back through the run log, the values are the floats the run saw.
    [again] = [e for e in read_metrics(run / "metrics.jsonl") if e["event"] == "halt"]
    assert all(not math.isfinite(again[key]) for key in named)
    bundle = Path(halt["postmortem"])
    strict_load((bundle / "halt.json").read_text())


def test_a_failing_postmortem_never_hides_the_documented_error(data_dir, tmp_path, monkeypatch):
    from nozero import NonFiniteError
    from nozero_trainer import runner

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "_write_postmortem", disk_full)
    with pytest.raises(NonFiniteError) as err:
        _run(data_dir, tmp_path / "run", TrainConfig(**{**TINY, "steps": 50, "peak_lr": 1e30}))
    assert err.value.postmortem is None
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "halted" and status["postmortem"] is None
