"""JAX trainers in styles the recipes do not show: a flax ``TrainState`` under
``nozero.jax.Guard`` passes as written (its compilations are counted, not its call
signatures; the guard's result is read as a per-step history), so does a ``lax.scan``
trainer that returns its list of per-step losses, a skipping one fails, and a library's
own non-finite error is named with its fix."""

from __future__ import annotations

import functools

# Imported once here so the in-process pytest runs below reuse them instead of reloading.
import flax  # noqa: F401
import jax
import jax.numpy as jnp
import numpy as np
import optax  # noqa: F401
import pytest

from nozero.plugin.foreign import foreign_check
from nozero.plugin.outcome import read_returned
from nozero.testing import count_traces

pytest_plugins = ["pytester"]
FEW = ("--nozero", "--nozero-examples=5", "-p", "no:cacheprovider", "--hypothesis-seed=0")


def test_a_trainstate_under_the_guard_and_a_scan_passes_a_skipping_one_fails(
    contract_dir, item_reports
):
    reports = item_reports(
        contract_dir.inline_run(
            *FEW,
            "--nozero-trainer=styles_jax:trainstate_guard",
            "--nozero-trainer=styles_jax:scan_losses",
            "--nozero-trainer=styles_jax:trainstate_apply_if_finite",
        )
    )
    passing = {name: r for name, r in reports.items() if "apply_if_finite" not in name}
    assert len(passing) == 8 and all(r.passed for r in passing.values()), {
        name: r.longreprtext for name, r in passing.items() if not r.passed
    }
    halts = reports["nozero::halts[styles_jax:trainstate_apply_if_finite]"]
    assert halts.failed
    assert "never raised: returned normally: a TrainState" in halts.longreprtext
    assert "left no non-finite trace in what it returned (skipped" in halts.longreprtext


def test_weakly_typed_first_parameters_compile_twice_and_the_message_says_so(
    contract_dir, item_reports
):
    trainer = "--nozero-trainer=styles_jax:scan_losses_weak_init"
    reports = item_reports(contract_dir.inline_run(*FEW, trainer, "-k", "halts"))
    text = reports["nozero::halts[styles_jax:scan_losses_weak_init]"].longreprtext
    assert "compiled 2 times during the 'halts' check" in text
    assert "jnp.full(shape, 0.1) without dtype=" in text


def test_a_list_of_scalars_is_a_loss_history_only_at_the_run_s_length():
    units = {8: "micro-batch", 4: "step"}
    history = read_returned([jnp.float32(0.5)] * 4, units).history
    assert history.entries == ((0.5, None),) * 4 and history.unit == "step"
    assert read_returned([0.5] * 8, units).history.unit == "micro-batch"
    weights = read_returned([np.float32(0.1), np.float32(0.2)], units)  # two scalar params
    assert weights.history is None and weights.state_arrays == 2


def test_count_traces_counts_compilations_not_call_signatures():
    @jax.jit
    def scaled(state, x):
        return {"w": state["w"] * x, "step": state["step"] + 1}

    counter = count_traces(scaled)
    state = {"w": jnp.ones(3), "step": 0}  # a Python int first, an array from then on
    for _ in range(3):
        state = scaled(state, jnp.float32(0.5))
    assert scaled._cache_size() == 2  # two signatures ...
    assert counter() == 1  # ... one compilation

    @functools.partial(jax.jit, static_argnums=1)
    def power(x, n):
        return x**n

    counter = count_traces(power)
    for n in range(3):  # a static argument that changes: a real retrace each time
        power(jnp.ones(2), n)
    assert counter() == 3


def test_jax_debug_nans_and_numpy_raise_are_named_with_their_fix():
    with jax.debug_nans(True), pytest.raises(FloatingPointError) as debug_nans:
        jax.jit(jnp.log)(-1.0)
    assert "jax_debug_nans" in foreign_check(debug_nans.value)
    with np.errstate(all="raise"), pytest.raises(FloatingPointError) as numpy_raise:
        np.float32(3e38) * np.float32(10)
    assert "np.errstate(all='raise')" in foreign_check(numpy_raise.value)
    assert foreign_check(ValueError("loss is nan")) is None


DIVERGING_SGD = """
import numpy as np
import pytest

from nozero import check_finite
from nozero.testing import TrainerUnderTest


def train(batches):  # least squares by plain SGD, no clipping: large inputs blow it up
    w = np.full((4, 1), 0.1, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for step, batch in enumerate(batches):
            error = batch["x"] @ w - batch["y"]
            grad = 2 * batch["x"].T @ error / len(error)
            check_finite(step, float(np.mean(error**2)), float(np.linalg.norm(grad)))
            w = w - 0.1 * grad
    return w


@pytest.fixture
def nozero_trainer():
    rng = np.random.default_rng(0)
    return TrainerUnderTest.from_example(
        {"x": rng.standard_normal((8, 4)).astype(np.float32),
         "y": rng.standard_normal((8, 1)).astype(np.float32)}, train)
"""


def test_a_divergence_on_large_clean_inputs_names_clipping_in_each_framework(
    pytester, item_reports
):
    pytester.makeconftest(DIVERGING_SGD)
    # Under every profile, Hypothesis's derandomized one for CI included: the largest clean
    # magnitude is an explicit example, so no search has to stumble on it.
    for profile in ("default", "ci"):
        run = pytester.inline_run(
            "--nozero",
            "--nozero-examples=30",
            "--hypothesis-seed=0",
            f"--hypothesis-profile={profile}",
        )
        text = item_reports(run)["nozero::no_false_alarm[nozero_trainer]"].longreprtext
        assert "the trainer diverged on clean, finite batches" in text, profile
        assert "clip gradients (optax.clip_by_global_norm, torch.nn.utils.clip_grad_norm_" in text


SKIPPING_LOOP = """
import numpy as np
import pytest

from nozero.testing import TrainerUnderTest


def train(batches):  # logistic regression that leaves out a step whose loss is not finite
    w = np.zeros((4, 1), np.float32)
    history = []
    with np.errstate(all="ignore"):
        for batch in batches:
            z = batch["x"] @ w
            loss = float(np.mean(np.logaddexp(0, z) - batch["y"] * z))
            grad = batch["x"].T @ (1 / (1 + np.exp(-z)) - batch["y"]) / len(z)
            norm = float(np.linalg.norm(grad))
            if not (np.isfinite(loss) and np.isfinite(norm)):
                continue  # skip the step
            w = w - 0.1 * grad
            history.append((loss, norm))
    return history


@pytest.fixture
def nozero_trainer():
    rng = np.random.default_rng(0)
    return TrainerUnderTest.from_example(
        {"x": rng.standard_normal((8, 4)).astype(np.float32),
         "y": (rng.random((8, 1)) < 0.5).astype(np.float32)}, train, poison_fields=["x"])
"""


def test_a_loop_that_leaves_out_an_overflowing_step_fails_overflow(pytester, item_reports):
    pytester.makeconftest(SKIPPING_LOOP)
    reports = item_reports(pytester.inline_run(*FEW, "-k", "overflow"))
    text = reports["nozero::overflow[nozero_trainer]"].longreprtext
    assert "entries, after a huge value, where a run on clean batches returns 4: steps skipped" in (
        text
    )
