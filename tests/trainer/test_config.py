"""Settings: every bad one is refused by name before training; JSON round trip."""

from __future__ import annotations

import numpy as np
import pytest

from nozero_trainer.config import SettingsError, TrainConfig, check_settings, flag_name, validate
from nozero_trainer.heads import DEFAULT_HEADS

COUNTS = np.full(len(DEFAULT_HEADS), 10.0)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"focal_gamma": -0.5}, "focal_gamma"),
        ({"focal_gamma": float("nan")}, "focal_gamma"),
        ({"focal_alpha": 1.5}, "focal_alpha"),
        ({"focal_alpha": -0.1}, "focal_alpha"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"label_smoothing": -0.1}, "label_smoothing"),
        ({"peak_lr": 0.0}, "peak_lr"),
        ({"peak_lr": -1e-3}, "peak_lr"),
        ({"peak_lr": float("inf")}, "peak_lr"),
        ({"peak_lr": float("nan")}, "peak_lr"),
        ({"peak_lr": 1e39}, "peak_lr"),  # finite in float64, infinite in float32
        ({"warmup_steps": 200, "steps": 100}, "warmup_steps"),
        ({"batch_size": 1001}, "batch_size"),
        ({"steps": 0}, "steps"),
        ({"reverse_ce_weight": -1.0}, "reverse_ce_weight"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"hidden_dims": (8, 0)}, "hidden_dims"),
        ({"end_lr_ratio": 2.0}, "end_lr_ratio"),
    ],
)
def test_bad_setting_is_refused_by_name(change, named):
    with pytest.raises(SettingsError) as refused:
        validate(TrainConfig(**change), 1000, COUNTS)
    assert [p.setting for p in refused.value.problems] == [named]
    assert flag_name(named) in str(refused.value)


def test_defaults_are_valid():
    assert validate(TrainConfig(), 1000, COUNTS) == ()


def test_zero_positive_head_refused_by_name_or_masked():
    counts = COUNTS.copy()
    counts[DEFAULT_HEADS.index("RTBot")] = 0
    with pytest.raises(ValueError, match="head 'RTBot' has zero positive"):
        validate(TrainConfig(), 1000, counts)
    assert validate(TrainConfig(mask_zero_positive_heads=True), 1000, counts) == ("RTBot",)
    # Without class weighting the count is not needed: nothing refused, nothing masked.
    assert validate(TrainConfig(class_weighting=False), 1000, counts) == ()


def test_json_round_trip_and_hashable():
    config = TrainConfig(hidden_dims=[64, 32], focal_alpha=0.25, heads=["A", "B"])
    assert config.hidden_dims == (64, 32)
    again = TrainConfig.from_dict(config.to_dict())
    assert again == config and hash(again) == hash(config)
    with pytest.raises(ValueError, match="unknown TrainConfig setting"):
        TrainConfig.from_dict({"stepz": 3})


def test_compile_key_ignores_only_host_side_settings():
    base = TrainConfig()
    assert TrainConfig(seed=5, sync_every=7, eval_every=3).compile_key() == base.compile_key()
    assert TrainConfig(focal_gamma=1.0).compile_key() != base.compile_key()


def test_every_bad_setting_is_reported_at_once():
    config = TrainConfig(steps=0, peak_lr=-1.0, focal_gamma=float("nan"), chunk_steps=0)
    assert [p.setting for p in check_settings(config)] == [
        "steps",
        "chunk_steps",
        "peak_lr",
        "focal_gamma",
    ]
    counts = COUNTS.copy()
    counts[:2] = 0
    with pytest.raises(SettingsError) as refused:
        validate(TrainConfig(batch_size=5000, label_smoothing=2.0), 1000, counts)
    assert [p.setting for p in refused.value.problems] == [
        "label_smoothing",
        "batch_size",
        "mask_zero_positive_heads",
    ]
    assert "'FollowBot', 'LikeBot'" in str(refused.value)


@pytest.mark.parametrize("steps", [1, 2, 19, 20, 100, 2000, 10**6])
def test_the_default_warmup_fits_any_run_length(steps):
    config = TrainConfig(steps=steps)
    assert check_settings(config) == []
    assert 0 <= config.warmup_steps < steps and config.warmup_steps == steps // 20
    assert TrainConfig(steps=steps, warmup_steps=0).warmup_steps == 0  # given: kept
