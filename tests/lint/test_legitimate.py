"""Legitimate shapes are left alone: input-data cleaning, metrics, evaluation scores,
plots, padding masks, checks that raise, dynamic loss scaling, a device-side guard that
records the failure for a raise, and this repository's own sources."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nozero.lint.engine import lint_source
from nozero.lint.rules import ALL_RULES

EVERY_CODE = {rule.code for rule in ALL_RULES}
# By-design practices have opt-in rules of their own; the shapes below are legitimate
# under every other rule.
BY_DESIGN = {"NZ406", "NZ407", "NZ408"}
REPO_ROOT = Path(__file__).resolve().parents[2]

LEGITIMATE = {
    "drop non-finite rows while loading": """\
        import numpy as np
        import pyarrow.compute as pc
        def load(table):
            cls = np.stack(table.column("cls").to_numpy(zero_copy_only=False))
            keep = np.isfinite(cls).all(axis=1)
            print(f"dropped {int((~keep).sum())} rows with non-finite embeddings")
            return cls[keep]
        """,
    "nan_to_num on features and labels": """\
        import numpy as np
        def prepare(features, labels):
            features = np.nan_to_num(features, nan=0.0)
            labels[np.isnan(labels)] = 0
            return features, labels
        """,
    "find the first bad step in a loss history": """\
        import math
        def first_bad_step(history, first_step):
            for index, (loss, grad_norm) in enumerate(history):
                if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                    return first_step + index
            return None
        """,
    "skip bad input rows in a loop": """\
        import math
        def rows(reader):
            for row in reader:
                if math.isnan(row.value):
                    continue
                yield row
        """,
    "metrics and evaluation scores": """\
        import numpy as np
        import jax.numpy as jnp
        def evaluate(val_loss, accuracy, auc_per_head):
            val_loss = np.nan_to_num(val_loss)
            auc_per_head = jnp.where(jnp.isnan(auc_per_head), 0.0, auc_per_head)
            if np.isnan(accuracy):
                accuracy = 0.0
            return val_loss, accuracy, auc_per_head
        """,
    "plots": """\
        import numpy as np
        import matplotlib.pyplot as plt
        def plot_loss(history):
            curve = np.nan_to_num(np.asarray(history["loss"]))
            plt.plot(curve)
        """,
    "plotting and evaluation functions": """\
        import math
        import torch
        def plot_loss_curve(history, ax):
            for step, loss in history:
                if math.isnan(loss):
                    continue
                ax.scatter(step, loss)
        def evaluate(model, loader):
            model.eval()
            with torch.no_grad():
                losses = [model(batch) for batch in loader]
            return torch.nan_to_num(torch.stack(losses)).mean()
        """,
    "padding and attention masks": """\
        import jax.numpy as jnp
        def masked_loss(logits, targets, mask):
            logits = jnp.where(mask[..., None], logits, -1e9)
            scores = logits.masked_fill(~mask, float("-inf"))
            per_row = jnp.where(mask, (logits - targets) ** 2, 0.0)
            return per_row.sum() / mask.sum()
        """,
    "checks that raise": """\
        import math
        import jax.numpy as jnp
        from nozero import NonFiniteError, check_finite
        def train(loader, state):
            for step, batch in enumerate(loader):
                loss, grad_norm, state = update(state, batch)
                if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                    raise NonFiniteError(step, loss, grad_norm)
                check_finite(loss=loss, grad_norm=grad_norm, step=step)
                assert jnp.isfinite(loss)
            return state
        """,
    "re-raise after saving a post-mortem": """\
        def train(loader):
            for batch in loader:
                try:
                    loss = step(batch)
                except FloatingPointError:
                    dump(batch)
                    raise
        """,
    "torch GradScaler": """\
        import torch
        scaler = torch.cuda.amp.GradScaler()
        for batch in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda"):
                loss = model(batch)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        """,
    "flax DynamicScale": """\
        import functools
        import jax
        import jax.numpy as jnp
        from flax.training import dynamic_scale as dynamic_scale_lib
        def train_step(state, batch):
            dynamic_scale = state.dynamic_scale
            grad_fn = dynamic_scale.value_and_grad(loss_fn, has_aux=True)
            dynamic_scale, is_fin, (loss, aux), grads = grad_fn(state.params, batch)
            new_state = state.apply_gradients(grads=grads)
            select = functools.partial(jnp.where, is_fin)
            new_state = new_state.replace(
                opt_state=jax.tree.map(select, new_state.opt_state, state.opt_state),
                params=jax.tree.map(select, new_state.params, state.params),
                dynamic_scale=dynamic_scale,
            )
            return new_state
        """,
    "keras LossScaleOptimizer": """\
        import tensorflow as tf
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())
        with tf.GradientTape() as tape:
            loss = optimizer.get_scaled_loss(model(x))
        grads = optimizer.get_unscaled_gradients(tape.gradient(loss, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """,
    "device-side guard that records the failure for the host to raise": """\
        import jax
        import jax.numpy as jnp
        import optax
        def step(carry, batch):
            params, opt_state, record = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, new_opt_state = optimizer.update(grads, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            finite = jnp.isfinite(loss) & jnp.isfinite(optax.global_norm(grads))
            first_bad = ~record.bad & ~finite
            record = Record(bad=record.bad | ~finite,
                            step=jnp.where(first_bad, batch.step, record.step))
            new_params = jax.tree.map(lambda o, n: jnp.where(finite, n, o), params, new_params)
            return (new_params, new_opt_state, record), loss
        """,
    "lax.cond guard whose branches carry the flag out": """\
        import jax
        import jax.numpy as jnp
        import optax
        def guarded_update(grads, params, opt_state):
            updates, new_opt_state = optimizer.update(grads, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            update_ok = jnp.isfinite(optax.global_norm(updates))
            return jax.lax.cond(
                update_ok,
                lambda _: (new_params, new_opt_state, update_ok),
                lambda _: (params, opt_state, update_ok),
                None,
            )
        """,
    "a command that reports the halt and exits": """\
        import sys
        from nozero import NonFiniteError
        def main():
            try:
                train()
            except NonFiniteError as err:
                print(err, file=sys.stderr)
                return 3
            return 0
        """,
    "error_if_nonfinite=True": """\
        import torch
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        """,
}


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("name", sorted(LEGITIMATE))
def test_legitimate_shape_is_not_flagged(name, shortcuts):
    source = textwrap.dedent(LEGITIMATE[name])
    assert lint_source(source, "ok.py", select=EVERY_CODE - BY_DESIGN, shortcuts=shortcuts) == []


def test_dynamic_loss_scaling_is_reported_by_its_opt_in_rule_only():
    source = textwrap.dedent(LEGITIMATE["flax DynamicScale"])
    assert lint_source(source, "scale.py") == []
    [finding] = lint_source(source, "scale.py", select=EVERY_CODE)
    assert (finding.code, finding.line) == ("NZ406", 10)
    assert "is_fin set at line 8" in finding.message


def test_zeroing_gradients_by_hand_around_a_grad_scaler_is_flagged():
    source = textwrap.dedent(
        """\
        import torch
        scaler = torch.cuda.amp.GradScaler()
        for batch in loader:
            scaler.scale(model(batch)).backward()
            scaler.unscale_(optimizer)
            for p in model.parameters():
                p.grad[torch.isnan(p.grad)] = 0.0
            scaler.step(optimizer)
            scaler.update()
        """
    )
    findings = lint_source(source, "amp.py")
    assert [(f.line, f.code) for f in findings] == [(7, "NZ105")]


def test_the_same_guard_without_recording_the_failure_is_flagged():
    guarded = textwrap.dedent(
        LEGITIMATE["device-side guard that records the failure for the host to raise"]
    )
    unrecorded = "".join(
        line
        for line in guarded.splitlines(keepends=True)
        if "Record(" not in line and "step=jnp.where" not in line
    )
    assert len(unrecorded.splitlines()) == len(guarded.splitlines()) - 2
    assert [f.code for f in lint_source(unrecorded, "guard.py")] == ["NZ410"]


def test_this_repository_src_lints_clean_with_every_rule():
    files = sorted((REPO_ROOT / "src").rglob("*.py"))
    assert any(f.name == "loop.py" for f in files)  # the trainer's device-side guard
    for path in files:
        source = path.read_text(encoding="utf-8")
        assert lint_source(source, str(path), select=EVERY_CODE) == [], path
