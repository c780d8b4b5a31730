"""Finiteness tests that name no finiteness word, and the messages of an ``if``/``else``.

- ``if loss < limit: <step> else: <skip>``: NaN fails every comparison, so the ``else``
  is where a non-finite loss goes (speechbrain's ``loss_upper_lim`` recipes);
  ``if not loss < limit: continue`` is the same test turned round;
- ``g.ne(g)`` and ``torch.ne(g, g)`` are ``g != g``;
- a loss clamped below a bound before the step trains on the bound when it is infinite;
- a ``continue`` in the ``else`` of ``if ok: <step>`` leaves before the step, so it is no
  "update already applied".

Each case runs with and without the pre-filter's shortcuts: the shortcuts never change
the findings. The look-alikes beside each shape stay clean.
"""

from __future__ import annotations

import textwrap

import pytest

from nozero.lint.engine import lint_source


def _found(source: str, shortcuts: bool = True) -> list[tuple[int, str, str]]:
    findings = lint_source(textwrap.dedent(source), "train.py", shortcuts=shortcuts)
    return [(f.line, f.code, f.message) for f in findings]


INVALID = {
    "torch, a loss below a limit, else counted and zeroed": (
        """\
        import torch

        class Separation(Brain):
            def fit_batch(self, batch):
                loss = self.compute_objectives(self.compute_forward(batch), batch)
                if loss.nelement() > 0 and loss < self.hparams.loss_upper_lim:
                    self.scaler.scale(loss).backward()
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.nonfinite_count += 1
                    loss.data = torch.tensor(0.0).to(self.device)
                self.optimizer.zero_grad()
                return loss.detach()
        """,
        [(11, "NZ201")],
    ),
    "torch, not below the limit: continue": (
        """\
        def train(model, loader, optimizer, limit):
            for batch in loader:
                loss = model(batch)
                if not loss < limit:
                    continue
                loss.backward()
                optimizer.step()
        """,
        [(5, "NZ201")],
    ),
    "a grad norm below a number, else only a warning": (
        """\
        import torch

        def train(model, loader, optimizer, log):
            for batch in loader:
                model(batch).backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if grad_norm.item() < 1e4:
                    optimizer.step()
                else:
                    log.warning("large gradient, batch left out")
                optimizer.zero_grad()
        """,
        [(10, "NZ201")],
    ),
    "a loss below a limit, the step only in the if": (
        """\
        def train_step(model, batch, optimizer, cfg):
            loss = model(batch)
            loss.backward()
            if loss.item() <= cfg.max_loss:
                optimizer.step()
            optimizer.zero_grad()
        """,
        [(4, "NZ201")],
    ),
    "Keras, apply_gradients only below the limit": (
        """\
        import tensorflow as tf

        class Model(tf.keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compute_loss(x, y, self(x, training=True))
                grads = tape.gradient(loss, self.trainable_variables)
                if loss < self.loss_limit:
                    self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                return {"loss": loss}
        """,
        [(9, "NZ201")],
    ),
    "Lightning, training_step returns None above the limit": (
        """\
        import lightning as L

        class Module(L.LightningModule):
            def training_step(self, batch, batch_idx):
                loss = self.criterion(self(batch[0]), batch[1])
                if not loss < self.hparams.max_loss:
                    return None
                return loss
        """,
        [(7, "NZ201")],
    ),
    "JAX, the new params kept only below the limit": (
        """\
        import jax
        import jax.numpy as jnp
        import optax

        def train_step(params, opt_state, batch, max_loss):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, opt_state = tx.update(grads, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            params = jax.tree_util.tree_map(
                lambda n, o: jnp.where(loss < max_loss, n, o), new_params, params
            )
            return params, opt_state, loss
        """,
        [(9, "NZ410")],
    ),
    "JAX, lax.cond between the update and the old state": (
        """\
        import jax

        def step(state, batch, loss_limit):
            loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
            return jax.lax.cond(loss < loss_limit, apply_update, keep_state, state, grads)
        """,
        [(5, "NZ410")],
    ),
    "torch, loss.ne(loss)": (
        """\
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                if loss.ne(loss).any():
                    continue
                loss.backward()
                optimizer.step()
        """,
        [(5, "NZ201")],
    ),
    "torch, torch.ne(grad, grad)": (
        """\
        import torch

        def step(model, optimizer):
            for p in model.parameters():
                if torch.ne(p.grad, p.grad).any():
                    p.grad = None
            optimizer.step()
        """,
        [(6, "NZ201")],
    ),
    "torch, the loss clamped before backward": (
        """\
        import torch

        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                loss = torch.clamp(loss, max=1e4)
                loss.backward()
                optimizer.step()
        """,
        [(6, "NZ106")],
    ),
    "torch, the loss's own clamp method with both bounds": (
        """\
        def training_step(self, batch):
            loss = self.criterion(self(batch.x), batch.y)
            loss = loss.clamp(0.0, 100.0)
            self.manual_backward(loss)
            self.optimizers().step()
        """,
        [(3, "NZ106")],
    ),
    "TF, clip_by_value of the loss in a GradientTape step": (
        """\
        import tensorflow as tf

        def train_step(model, optimizer, x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                loss = tf.clip_by_value(loss, 0.0, 1e4)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """,
        [(6, "NZ106")],
    ),
}

VALID = {
    "a loss clamped from below only": """\
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                loss = loss.clamp(min=0.0)
                loss.backward()
                optimizer.step()
        """,
    "probabilities clamped before the loss": """\
        import torch

        def train(model, loader, optimizer):
            for batch in loader:
                probs = torch.clamp(model(batch), 1e-6, 1 - 1e-6)
                loss = -(batch.y * probs.log()).mean()
                loss.backward()
                optimizer.step()
        """,
    "a loss clamped for the plot of an evaluation": """\
        import torch

        def evaluate(model, loader):
            losses = []
            for batch in loader:
                loss = model(batch)
                loss = torch.clamp(loss, max=10.0)
                losses.append(loss.item())
            return losses
        """,
    "a validation loss below the best one": """\
        def fit(model, loader, optimizer, best_loss, patience, limit):
            for batch in loader:
                loss = model(batch)
                loss.backward()
                optimizer.step()
            val_loss = evaluate(model)
            if val_loss < best_loss:
                best_loss = val_loss
                save(model)
            else:
                patience += 1
        """,
    "a clip by hand: the norm above the limit scales the gradients": """\
        def step(model, optimizer, max_norm):
            total_norm = grad_norm(model)
            if total_norm < max_norm:
                pass
            else:
                for p in model.parameters():
                    p.grad.mul_(max_norm / total_norm)
            optimizer.step()
        """,
    "a loss below a limit that only logs": """\
        def train(model, loader, optimizer, log, loss_limit):
            for batch in loader:
                loss = model(batch)
                loss.backward()
                optimizer.step()
                if loss < loss_limit:
                    log.info("below the limit")
                else:
                    log.info("above the limit")
        """,
    "a loss above a limit raises": """\
        def train(model, loader, optimizer, loss_limit):
            for batch in loader:
                loss = model(batch)
                if loss < loss_limit:
                    loss.backward()
                    optimizer.step()
                else:
                    raise FloatingPointError(f"loss {loss} above {loss_limit}")
        """,
    "a loss below zero is a different question": """\
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                if loss < 0:
                    loss.backward()
                    optimizer.step()
                else:
                    continue
        """,
    "JAX, a clip by hand in a where": """\
        import jax
        import jax.numpy as jnp

        def clip(grads, grad_norm, max_norm):
            return jax.tree_util.tree_map(
                lambda g: jnp.where(grad_norm < max_norm, g, g * max_norm / grad_norm), grads
            )
        """,
    "torch, adaptive clipping by a where on the norm (timm's shape)": """\
        import torch

        def adaptive_clip_grad(parameters, clip_factor=0.01):
            for p in parameters:
                g_data = p.grad.detach()
                max_norm = unitwise_norm(p.detach()).mul_(clip_factor)
                grad_norm = unitwise_norm(g_data)
                clipped_grad = g_data * (max_norm / grad_norm.clamp(min=1e-6))
                new_grads = torch.where(grad_norm < max_norm, g_data, clipped_grad)
                p.grad.detach().copy_(new_grads)
        """,
    "JAX, a where that caps a value at its limit": """\
        import jax.numpy as jnp

        def capped(loss, max_loss):
            return jnp.where(loss < max_loss, loss, max_loss)
        """,
    "a padding mask with ne": """\
        def train(model, loader, optimizer, pad_id):
            for batch in loader:
                mask = batch.labels.ne(pad_id)
                if mask.any():
                    loss = model(batch, mask)
                    loss.backward()
                    optimizer.step()
        """,
    "a step counter below its limit": """\
        def train(model, loader, optimizer, max_steps):
            for step, batch in enumerate(loader):
                if step < max_steps:
                    model(batch).backward()
                    optimizer.step()
                else:
                    break
        """,
}


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("name", sorted(INVALID))
def test_implicit_finiteness_tests_are_found(name: str, shortcuts: bool):
    source, expected = INVALID[name]
    assert [(line, code) for line, code, _ in _found(source, shortcuts)] == expected


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("name", sorted(VALID))
def test_their_look_alikes_stay_clean(name: str, shortcuts: bool):
    assert _found(VALID[name], shortcuts) == []


def test_a_limit_message_names_the_comparison_and_the_skip():
    source, _ = INVALID["torch, a loss below a limit, else counted and zeroed"]
    [(_, _, message)] = _found(source)
    assert "loss < self.hparams.loss_upper_lim, false for NaN tested at line 6" in message
    assert "the step is skipped here" in message


ELSE_CONTINUE = """\
import torch

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        inf_flag = not torch.isfinite(loss)
        if not inf_flag:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        else:
            continue
        log(loss)
"""

AFTER_THE_STEP = """\
import torch

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if not torch.isfinite(loss):
            continue
        log(loss)
"""


def test_a_continue_beside_the_step_is_a_skip_not_a_late_one():
    [(line, code, message)] = _found(ELSE_CONTINUE)
    assert (line, code) == (12, "NZ201")
    assert "the step is skipped here" in message
    assert "already applied" not in message
    # a ``continue`` on the same path after the step: the update is applied by then
    [(line, _, message)] = _found(AFTER_THE_STEP)
    assert line == 9
    assert "the update was already applied" in message
