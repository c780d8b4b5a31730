"""The documented error: message, pattern, attributes and check_finite's inputs."""

import math
import pickle

import numpy as np
import pytest

from nozero import MESSAGE_PATTERN, NonFiniteError, check_finite, format_message, parse_message


@pytest.mark.parametrize(
    ("loss", "grad_norm", "expected"),
    [
        (float("nan"), 1.5, "loss=nan grad_norm=1.5"),
        (0.25, float("inf"), "loss=0.25 grad_norm=inf"),
        (float("-inf"), float("nan"), "loss=-inf grad_norm=nan"),
    ],
)
def test_message_is_exactly_the_documented_text(loss, grad_norm, expected):
    err = NonFiniteError(7, loss, grad_norm)
    assert isinstance(err, RuntimeError)
    assert str(err) == (
        f"non-finite loss/grad at step 7: {expected} \u2014 stopping for investigation "
        "(never zero-and-continue)"
    )
    assert MESSAGE_PATTERN.fullmatch(str(err))
    assert err.step == 7


def test_parse_round_trips_and_rejects_other_text():
    step, loss, norm = parse_message(format_message(3, float("nan"), 2.0))
    assert step == 3 and math.isnan(loss) and norm == 2.0
    assert parse_message("non-finite loss/grad at step 3: loss=nan grad_norm=2.0") is None
    assert parse_message("loss went NaN") is None


def test_check_finite_accepts_floats_numpy_scalars_and_0d_arrays():
    check_finite(0, 0.5, 1.0)
    check_finite(1, np.float32(0.5), np.array(2.0))
    with pytest.raises(NonFiniteError) as info:
        check_finite(4, np.float32("nan"), np.array(1.0, dtype=np.float64))
    assert info.value.step == 4 and math.isnan(info.value.loss) and info.value.grad_norm == 1.0
    with pytest.raises(NonFiniteError, match="grad_norm=-inf"):
        check_finite(2, 1.0, np.array(-np.inf))


def test_check_finite_names_a_non_scalar():
    with pytest.raises(TypeError, match="loss must be a scalar"):
        check_finite(0, [1.0, 2.0], 1.0)


def test_error_survives_pickling_with_its_fields():
    err = pickle.loads(pickle.dumps(NonFiniteError(9, float("inf"), 3.0)))
    assert (err.step, err.loss, err.grad_norm) == (9, float("inf"), 3.0)
    assert str(err) == format_message(9, float("inf"), 3.0)
