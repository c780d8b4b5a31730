"""nozero.strategies: shapes fixed, values clean or poisoned as promised, edge cases reached,
and shrinking lands on the simplest poison."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument, NoSuchExample

from nozero.strategies import (
    HUGE_KINDS,
    NON_FINITE_KINDS,
    apply_poisons,
    clean_arrays,
    clean_batch_sequences,
    clean_batches,
    poisoned_batch_sequences,
    poisons,
)
from nozero.testing import TrainerUnderTest

SPEC = {"x": ((6, 5), np.float32), "y": ((6,), np.float64), "ids": ((6,), np.int64)}
SEARCH = settings(max_examples=400, database=None)


@given(clean_batches(SPEC))
def test_clean_batches_follow_the_spec_and_are_finite(batch):
    assert set(batch) == set(SPEC)
    for field, (shape, dtype) in SPEC.items():
        assert batch[field].shape == shape and batch[field].dtype == dtype
        assert np.isfinite(batch[field]).all()


@pytest.mark.parametrize(
    ("what", "condition"),
    [
        ("zeros", lambda a: not a.any()),
        ("constant columns", lambda a: a.any() and (a == a[:1]).all(axis=0).any()),
        ("tiny", lambda a: 0 < np.abs(a).max() < 1e-20),
        ("large", lambda a: np.abs(a).max() >= 1e5),
        ("noise", lambda a: len(np.unique(a)) == a.size),
    ],
)
def test_clean_arrays_reach_edge_cases(what, condition):
    found = find(clean_arrays((6, 5), np.float32), condition, settings=SEARCH)
    assert condition(found), what


def test_clean_arrays_never_exceed_the_large_magnitude_cap():
    with pytest.raises(NoSuchExample):
        find(clean_arrays((6, 5), np.float32), lambda a: np.abs(a).max() > 1e6, settings=SEARCH)


def test_make_clean_batch_is_the_base_and_varied_fields_get_edge_cases():
    def make(rng):
        return {"x": np.ones((6, 5), np.float32), "y": np.ones(6), "ids": np.arange(6)}

    strategy = clean_batches(SPEC, make_clean_batch=make, vary_fields=["x"])
    zeroed = find(strategy, lambda b: not b["x"].any(), settings=SEARCH)
    assert (zeroed["y"] == 1).all() and (zeroed["ids"] == np.arange(6)).all()


@given(poisons(SPEC, steps=4, kinds=NON_FINITE_KINDS + HUGE_KINDS))
def test_poisons_land_inside_float_fields_with_the_value_of_their_kind(poison):
    shape, dtype = SPEC[poison.field]
    assert poison.field in ("x", "y")
    assert 0 <= poison.step < 4
    assert all(0 <= i < n for i, n in zip(poison.index, shape, strict=True))
    if poison.kind == "nan":
        assert np.isnan(poison.value)
    elif poison.kind in ("+inf", "-inf"):
        assert poison.value == (np.inf if poison.kind == "+inf" else -np.inf)
    else:
        top = np.finfo(dtype).max
        assert top / 1024 <= abs(poison.value) <= top
        assert np.sign(poison.value) == (1 if poison.kind == "+huge" else -1)


def test_poisons_shrink_to_the_simplest_case():
    # A predicate every example satisfies is not shrunk to the end by ``find``; one that
    # rules out the first kind makes the shrinker work on every coordinate.
    simplest = find(poisons(SPEC, steps=4), lambda p: p.kind != "nan", settings=SEARCH)
    assert (simplest.kind, simplest.field, simplest.step) == ("+inf", "x", 0)
    assert set(simplest.index) == {0}
    late = find(poisons(SPEC, steps=4), lambda p: p.step >= 2 and p.kind == "-inf", settings=SEARCH)
    assert (late.step, late.value) == (2, -np.inf)
    assert set(late.index) == {0}


def test_poisons_reach_the_last_step_and_the_last_element():
    last = find(
        poisons(SPEC, steps=4), lambda p: p.step == 3 and p.index == (5, 4), settings=SEARCH
    )
    assert last.field == "x"


@given(poisoned_batch_sequences(SPEC, steps=3, max_poisons=3))
def test_poisoned_sequences_carry_exactly_their_poisons(run):
    assert len(run.batches) == 3
    assert run.first_step == min(p.step for p in run.poisons)
    final = {}  # a later poison of the same element overwrites an earlier one
    for poison in run.poisons:
        final[(poison.step, poison.field, poison.index)] = poison.value
    for (step, field, index), value in final.items():
        assert np.array_equal(run.batches[step][field][index], value, equal_nan=True)
    expected_bad = {where for where, value in final.items() if not np.isfinite(value)}
    found_bad = {
        (step, field, tuple(int(i) for i in index))
        for step, batch in enumerate(run.batches)
        for field in ("x", "y")
        for index in zip(*np.nonzero(~np.isfinite(batch[field])), strict=True)
    }
    assert found_bad == expected_bad


@given(clean_batch_sequences(SPEC, 2), st.data())
def test_apply_poisons_leaves_the_clean_batches_untouched(batches, data):
    before = [{k: v.copy() for k, v in b.items()} for b in batches]
    poison = data.draw(poisons(SPEC, steps=2))
    poisoned = apply_poisons(batches, [poison])
    for original, kept in zip(before, batches, strict=True):
        for field in SPEC:
            assert np.array_equal(original[field], kept[field])
    assert not np.isfinite(poisoned[poison.step][poison.field][poison.index])


def test_strategies_reject_bad_arguments_with_invalid_argument_naming_them():
    with pytest.raises(InvalidArgument, match=r"fields \['ids'\] are not float fields"):
        poisons(SPEC, 2, fields=["ids"])
    with pytest.raises(InvalidArgument, match="unknown kinds"):
        poisons(SPEC, 2, kinds=["zero"])
    with pytest.raises(InvalidArgument, match=r"batch_spec\['x'\] must be \(shape, numpy dtype\)"):
        clean_batches({"x": "float32"})
    with pytest.raises(InvalidArgument, match="steps must be an int >= 1, got 0"):
        clean_batch_sequences(SPEC, 0)
    with pytest.raises(InvalidArgument, match="max_poisons must be an int >= 1"):
        poisoned_batch_sequences(SPEC, 2, max_poisons=0)
    with pytest.raises(InvalidArgument, match=r"vary_fields: fields \['ids'\]"):
        clean_batches(SPEC, vary_fields=["ids"])


def test_trainer_under_test_validates_its_description():
    with pytest.raises(ValueError, match="poison_fields names 'ids', which is not one of the"):
        TrainerUnderTest(SPEC, lambda batches: None, poison_fields=["ids"])
    with pytest.raises(ValueError, match=r"vary_fields names 'y', .* float fields \['x'\]"):
        TrainerUnderTest(SPEC, lambda batches: None, poison_fields=["x"], vary_fields=["y"])
    with pytest.raises(ValueError, match="check_every must be >= 1"):
        TrainerUnderTest(SPEC, lambda batches: None, check_every=0)

    def wrong_shape(rng):
        return {"x": np.zeros((5, 5), np.float32), "y": np.zeros(6), "ids": np.zeros(6, np.int64)}

    trainer = TrainerUnderTest(SPEC, lambda batches: None, make_clean_batch=wrong_shape)
    with pytest.raises(ValueError, match=r"field 'x' as float32\[5, 5\]; batch_spec declares"):
        trainer.clean_batches(0, 2)


def test_rescaling_a_subnormal_array_stays_finite():
    from nozero.plugin.strategies import _variant_of

    subnormal = np.array([5e-324, -5e-324, 0.0])
    with pytest.raises(NoSuchExample):
        find(_variant_of(subnormal), lambda a: not np.isfinite(a).all(), settings=SEARCH)
