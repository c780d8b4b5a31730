"""A corpus of training-code shapes in the styles of torch, JAX/flax/optax, TF/Keras,
Lightning, Hugging Face and DeepSpeed code: each case names the findings (line, code) it
must produce, with and without the pre-filters. An empty list is a VALID case.

Cases are small programs written for this suite; the shapes are those that real training
code uses (a flag set in one place and reacted to in another, helpers that return tuples,
library finiteness helpers, tree maps, tests and evaluation code that touch nothing).
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from nozero.lint.catalog import ALL_CODES
from nozero.lint.engine import lint_source


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    expected: tuple[tuple[int, str], ...] = ()
    every_rule: bool = False  # run with every rule on (opt-in rules included)


def case(name: str, source: str, *expected: tuple[int, str], every_rule: bool = False) -> Case:
    return Case(name, textwrap.dedent(source), tuple(expected), every_rule)


def opt_in_or_not(
    name: str,
    source: str,
    *,
    default: Sequence[tuple[int, str]] = (),
    every_rule: Sequence[tuple[int, str]] = (),
) -> tuple[Case, Case]:
    """The same code under the default rules and with every rule on: where an opt-in rule
    takes a site, the default rules must stay silent on it (or report it as before)."""
    return (
        case(f"{name}, default rules", source, *default),
        case(f"{name}, every rule on", source, *every_rule, every_rule=True),
    )


def _lightning_step_leaving_with(leave: str) -> str:
    """A ``training_step`` that leaves with ``leave`` on a NaN loss, and otherwise records
    the loss and hands back ``{"loss": loss}``."""
    return textwrap.dedent(
        f"""\
        import torch
        import pytorch_lightning as pl
        class Model(pl.LightningModule):
            def training_step(self, batch, batch_idx):
                loss = self.compute_loss(batch)
                if torch.isnan(loss) or torch.isinf(loss):
                    print("NaN/Inf loss")
                    {leave}
                self.outputs.append(loss.detach())
                return {{"loss": loss}}
        """
    )


def _scaled_loop_skipping(branch: list[str]) -> str:
    """A GradScaler loop whose non-finite gradient norm runs ``branch`` (line by line)
    before the scaler's step and update."""
    lines = "\n".join(f"                    {line}" for line in branch)
    return textwrap.dedent(
        f"""\
        import torch
        def train(model, loader, optimizer, scaler):
            for batch in loader:
                loss = model(batch)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if not torch.isfinite(norm):
{lines}
                scaler.step(optimizer)
                scaler.update()
        """
    )


def _rolled_back(then: str) -> str:
    """A loop that loads the last good weights on a NaN loss, then does ``then``."""
    return textwrap.dedent(
        f"""\
        import torch
        def train(model, loader, optimizer, last_good):
            for batch in loader:
                loss = model(batch)
                if not torch.isfinite(loss):
                    model.load_state_dict(last_good)
                    {then}
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """
    )


def _minibatch_skipped_on_a_flag(branch: list[str]) -> str:
    """Micro-batches whose NaN loss runs ``branch`` (line by line), and a minibatch whose
    step is skipped on the flag the branch sets."""
    lines = "\n".join(f"                        {line}" for line in branch)
    return textwrap.dedent(
        f"""\
        import torch
        def train(model, minibatches, optimizer):
            for minibatch in minibatches:
                skip = False
                for micro in minibatch:
                    loss = model(micro)
                    if not loss.isfinite():
{lines}
                    loss.backward()
                if skip:
                    continue
                optimizer.step()
        """
    )


def _update_per_batch(handed_back: str) -> str:
    """An update helper, called for each batch, whose handler for any error hands back
    ``handed_back``."""
    return textwrap.dedent(
        f"""\
        def update(model, optimizer, batch):
            try:
                optimizer.zero_grad()
                loss = model(batch)
                loss.backward()
                optimizer.step()
            except RuntimeError as err:
                print("update failed:", err)
                return {handed_back}
            return loss.item()
        def fit(model, optimizer, loader):
            for batch in loader:
                update(model, optimizer, batch)
        """
    )


def _warn_then_clean(cleaning: str) -> str:
    """A train step that warns on a NaN gradient, then cleans it with ``cleaning``."""
    head = textwrap.dedent(
        """\
        import torch
        def train_step(self, batch):
            loss = self.criterion(self.model(batch.x), batch.y)
            self.optimizer.zero_grad()
            loss.backward()
            for name, param in self.model.named_parameters():
                if torch.isnan(param.grad).any():
                    print(f"NaN gradient in {name}")
        """
    )
    step = "    self.optimizer.step()\n"
    return head + textwrap.indent(textwrap.dedent(cleaning), " " * 12) + step


HAND_WRITTEN = [
    # ---- torch: the decision goes through a flag ------------------------------------
    case(
        "a callback marks the update to be skipped for the framework's loop",
        """\
        import torch
        class SkipNanLoss(Callback):
            def after_backward(self, loss, **kwargs):
                if torch.isnan(loss):
                    self.log.info("NaN loss, skipping the update")
                    self.skip_next_update = True
        """,
        (6, "NZ201"),
    ),
    case(
        "a skip mark the class skips on itself: reported once, where it skips",
        """\
        import torch
        class Trainer:
            def after_backward(self, loss):
                if not torch.isfinite(loss):
                    self.skip = True
            def step(self):
                if self.skip:
                    self.skip = False
                    return
                self.optimizer.step()
        """,
        (9, "NZ201"),
    ),
    case(
        "a skip mark that raises first is no skip",
        """\
        import torch
        class Trainer:
            def after_backward(self, loss):
                if torch.isnan(loss):
                    self.skip_next_update = True
                    raise FloatingPointError("NaN loss")
        """,
    ),
    case(
        "a mark on another object's switch is left to that object (an fp16 optimizer's)",
        """\
        import torch
        class Trainer:
            def train_step(self, loss):
                if not torch.isfinite(loss):
                    self.model.optimizer.skip_step = True
                self.model.step()
        """,
    ),
    case(
        "torch flag then continue",
        """\
        import torch
        for step, batch in enumerate(loader):
            loss = model(batch).mean()
            loss.backward()
            bad = not torch.isfinite(loss)
            optimizer.step() if not bad else None
            if bad:
                optimizer.zero_grad()
                continue
        """,
        (8, "NZ201"),
    ),
    case(
        "torch flag from a same-file helper, tuple return",
        """\
        import torch
        def grads_ok(model):
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            return norm, bool(torch.isfinite(norm))
        def train(model, loader, optimizer):
            for batch in loader:
                model(batch).backward()
                norm, ok = grads_ok(model)
                if not ok:
                    optimizer.zero_grad()
                    continue
                optimizer.step()
        """,
        (10, "NZ201"),
    ),
    case(
        "torch flag reduced across ranks with .item()",
        """\
        import torch
        import torch.distributed as dist
        def step(self):
            found = torch.isnan(self.grad_norm).float()
            dist.all_reduce(found)
            if found.item() > 0:
                return
            self.optimizer.step()
        """,
        (7, "NZ201"),
    ),
    case(
        "torch step only taken when finite",
        """\
        import torch
        for batch in loader:
            loss = model(batch)
            loss.backward()
            if torch.isfinite(loss):
                optimizer.step()
            optimizer.zero_grad()
        """,
        (5, "NZ201"),
    ),
    case(
        "torch gradients set to None on NaN",
        """\
        import torch
        def on_after_backward(model):
            for p in model.parameters():
                if p.grad is not None and torch.isnan(p.grad).any():
                    p.grad = None
        """,
        (5, "NZ201"),
    ),
    case(
        "torch gradients zeroed in place",
        """\
        import torch
        for p in model.parameters():
            if torch.isinf(p.grad).any():
                p.grad.zero_()
        """,
        (4, "NZ201"),
    ),
    case(
        "torch gradients filled with zero",
        """\
        import torch
        for p in params:
            if not torch.isfinite(p.grad).all():
                p.grad.fill_(0)
        """,
        (4, "NZ201"),
    ),
    case(
        "one branch raises, the other goes on",
        """\
        import torch
        def train_step(self, sample, retry):
            norm = self.clip_grad_norm(self.max_norm)
            skip = False
            if not torch.isfinite(norm).all():
                if retry:
                    skip = True
                else:
                    raise FloatingPointError("gradients are not finite")
            if skip:
                self.zero_grad()
                return None
            self.optimizer.step()
        """,
        (11, "NZ201"),
    ),
    case(
        "the raise alone is no finding",
        """\
        import torch
        def train_step(self, sample):
            norm = self.clip_grad_norm(self.max_norm)
            if not torch.isfinite(norm).all():
                raise FloatingPointError("gradients are not finite")
            self.optimizer.step()
        """,
    ),
    case(
        "self comparison of the loss",
        """\
        for batch in loader:
            loss = criterion(model(batch), batch.y)
            if loss != loss:
                continue
            loss.backward()
        """,
        (4, "NZ201"),
    ),
    case(
        "equality with inf",
        """\
        for batch in loader:
            loss = criterion(model(batch), batch.y)
            if loss.item() == float("inf"):
                continue
            loss.backward()
        """,
        (4, "NZ201"),
    ),
    case(
        "returning the checked name with the old state",
        """\
        import jax.numpy as jnp
        def train_step(params, opt_state, batch):
            loss, grads = grad_fn(params, batch)
            if jnp.isnan(loss):
                return params, opt_state, loss
            return apply(params, opt_state, grads)
        """,
        (5, "NZ201"),
    ),
    case(
        "per-sample losses dropped before the mean",
        """\
        import torch
        def compute_loss(logits, targets):
            per_sample_loss = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
            keep = torch.isfinite(per_sample_loss)
            return per_sample_loss[keep].mean()
        """,
        (5, "NZ107"),
    ),
    case(
        "input rows dropped while loading is fine",
        """\
        import numpy as np
        def load(table):
            features = np.asarray(table)
            return features[np.isfinite(features).all(axis=1)]
        """,
    ),
    case(
        "masked_fill of the loss",
        """\
        import torch
        loss = loss.masked_fill(torch.isnan(loss), 0.0)
        """,
        (2, "NZ104"),
    ),
    # ---- JAX / optax / flax ---------------------------------------------------------
    case(
        "tree map with a lambda replaces NaN updates",
        """\
        import jax
        import jax.numpy as jnp
        def update_fn(updates, state, params=None):
            updates = jax.tree.map(lambda u: jnp.where(jnp.isnan(u), jnp.zeros_like(u), u), updates)
            return updates, state
        """,
        (4, "NZ106"),
    ),
    case(
        "lax.cond rejects the update with zeros",
        """\
        import jax
        import jax.numpy as jnp
        from jax import lax
        def update(updates, state):
            leaves = jax.tree.leaves(updates)
            finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(u)) for u in leaves]))
            def reject(_):
                return jax.tree.map(jnp.zeros_like, updates), state
            def accept(_):
                return inner(updates, state)
            return lax.cond(finite, accept, reject, None)
        """,
        (11, "NZ201"),
    ),
    case(
        "skip predicate for gradient accumulation",
        """\
        import jax
        import jax.numpy as jnp
        def skip_bad_updates(updates, step, params):
            counts = [jnp.sum(~jnp.isfinite(u)) for u in jax.tree.leaves(updates)]
            bad = jnp.sum(jnp.array(counts))
            should_skip = bad > 0
            return should_skip, {"bad": bad}
        """,
        (6, "NZ201"),
    ),
    case(
        "old params kept by where, flag only logged",
        """\
        import logging
        import jax
        import jax.numpy as jnp
        def step(params, new_params, loss):
            ok = jnp.isfinite(loss)
            logging.info("finite=%s", ok)
            return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
        """,
        (7, "NZ410"),
    ),
    case(
        "old params kept, flag returned for the host",
        """\
        import jax
        import jax.numpy as jnp
        def step(params, new_params, loss):
            ok = jnp.isfinite(loss)
            params = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
            return params, ok
        """,
    ),
    case(
        "train_and_evaluate no longer hides the switch",
        """\
        import optax
        def train_and_evaluate(config, workdir):
            tx = optax.apply_if_finite(optax.adam(config.lr), max_consecutive_errors=5)
            return tx
        """,
        (3, "NZ401"),
    ),
    case(
        "train_and_evaluate no longer hides nan_to_num of grads",
        """\
        import jax
        import jax.numpy as jnp
        def train_and_evaluate(params, batch):
            grads = jax.grad(loss_fn)(params, batch)
            grads = jnp.nan_to_num(grads)
            return grads
        """,
        (5, "NZ101"),
    ),
    case(
        "re-export of a switch enables nothing",
        """\
        from optax import transforms
        zero_nans = transforms.zero_nans
        apply_if_finite = transforms.apply_if_finite
        """,
    ),
    case(
        "a test exercising the switch",
        """\
        import optax
        def test_apply_if_finite_skips_nan():
            tx = optax.apply_if_finite(optax.sgd(1.0), 2)
            assert tx is not None
        """,
    ),
    case(
        "a TestCase exercising zero_nans",
        """\
        import unittest
        import optax
        class ZeroNansTest(unittest.TestCase):
            def test_zeroes(self):
                tx = optax.zero_nans()
                self.assertIsNotNone(tx)
        """,
    ),
    case(
        "nan_to_num making Inf more visible",
        """\
        import jax.numpy as jnp
        grads = jnp.nan_to_num(grads, nan=jnp.nan, posinf=jnp.nan, neginf=jnp.nan)
        """,
    ),
    case(
        "nan_to_num guarding the 0/0 of a clip factor",
        """\
        import jax.numpy as jnp
        def clip(grads, norms, max_norm):
            factor = jnp.nan_to_num(jnp.minimum(max_norm / norms, 1.0), nan=1.0)
            return grads * factor
        """,
    ),
    case(
        "finiteness test of a setting",
        """\
        import math
        def configure(self, max_grad_norm):
            if not math.isfinite(max_grad_norm):
                return None
            return max_grad_norm
        """,
    ),
    *opt_in_or_not(
        "flax DynamicScale select",
        """\
        import functools
        import jax
        import jax.numpy as jnp
        def train_step(state, batch):
            grad_fn = state.dynamic_scale.value_and_grad(loss_fn, has_aux=True)
            dynamic_scale, is_fin, aux, grads = grad_fn(state.params)
            new_state = state.apply_gradients(grads=grads)
            keep = functools.partial(jnp.where, is_fin)
            params = jax.tree.map(keep, new_state.params, state.params)
            return new_state.replace(params=params, dynamic_scale=dynamic_scale)
        """,
        every_rule=[(8, "NZ406")],
    ),
    *opt_in_or_not(
        "an optional AMP scaler: the code's own NaN-gradient skip outside its branch",
        """\
        import torch
        def train_step(self, batch):
            loss = self.loss(batch)
            if self.use_amp:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
            for name, param in self.net.named_parameters():
                if param.grad is not None and torch.isnan(param.grad).any():
                    self.optimizer.zero_grad()
                    return 0.0
            if self.use_amp:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        """,
        default=[(10, "NZ201")],
        every_rule=[(10, "NZ201"), (13, "NZ406")],
    ),
    *opt_in_or_not(
        "an overflow flag set in the scaler's branch of an optional AMP switch",
        """\
        class Optimizer:
            def prepare_grads(self):
                found_inf = False
                if self.grad_scaler:
                    found_inf = self._unscale_and_check_for_nan()
                    self.grad_scaler.update(found_inf)
                return found_inf
            def step(self):
                found_inf = self.prepare_grads()
                if found_inf:
                    return False
                self.optimizer.step()
                return True
        """,
        every_rule=[(11, "NZ406")],
    ),
    *opt_in_or_not(
        "jmp dynamic loss scale: old state kept on overflow, the scale adjusted",
        """\
        import jmp
        import optax
        def train_step(params, opt_state, grads, loss_scale, tx):
            updates, new_opt_state = tx.update(grads, opt_state)
            new_params = optax.apply_updates(params, updates)
            grads_finite = jmp.all_finite(grads)
            loss_scale = loss_scale.adjust(grads_finite)
            new_params, new_opt_state = jmp.select_tree(
                grads_finite, (new_params, new_opt_state), (params, opt_state)
            )
            return new_params, new_opt_state, loss_scale
        """,
        every_rule=[(8, "NZ406")],
    ),
    case(
        "a JAX validation pass (no no_grad there) leaving NaN batch losses out of its average",
        """\
        import jax
        import numpy as np
        def _val(loss_func, params, dataset):
            losses = [loss_func(params, batch) for batch in dataset]
            losses_np = np.array(losses)
            losses_np = losses_np[~np.isnan(losses_np)]
            return float(np.mean(losses_np))
        """,
    ),
    *opt_in_or_not(
        "a loss function that only warns on a NaN loss and hands it on to be backpropagated",
        """\
        import torch
        class Agent:
            def _compute_ppo_losses(self, batch):
                actor_loss = -torch.min(self.surrogates(batch)).mean()
                critic_loss = self.value_loss(batch)
                if torch.isnan(actor_loss) or torch.isinf(actor_loss):
                    print("Warning: NaN or inf detected in actor loss")
                return actor_loss, critic_loss
        """,
        every_rule=[(6, "NZ203")],
    ),
    case(
        "a helper not named for a loss that warns and hands the value back: its caller decides",
        """\
        import torch
        def describe(values):
            if torch.isnan(values).any():
                print("values hold NaN")
            return values
        """,
    ),
    case(
        "a Lightning validation_step skipping a NaN batch through the module's shared step",
        """\
        class Model(LightningModule):
            def validation_step(self, batch, batch_idx):
                loss, logits = self.step(batch)
                if logits.isnan().any():
                    return None
                self.log("loss/val", loss.item())
            def step(self, batch):
                logits = self(batch)
                return self.criterion(logits, batch["y"]), logits
        """,
    ),
    case(
        "a running total for the logs leaving NaN losses out as numbers",
        """\
        import torch
        for batch in loader:
            d_loss = critic(batch)
            d_loss.backward()
            optimizer.step()
            total += d_loss.item() if not torch.isnan(d_loss) else 0
        """,
    ),
    case(
        "a function named for evaluation that also updates is code that trains",
        """\
        import jax
        import jax.numpy as jnp
        def _value_and_grad(fn, x):
            return jax.value_and_grad(fn)(x)
        def eval_and_stable_update(self, fn, state):
            out, grads = _value_and_grad(fn, x=self.get_params(state))
            return jax.lax.cond(
                jnp.isfinite(out),
                lambda _: (out, self.update(grads, state)),
                lambda _: (jnp.nan, state),
                None,
            )
        """,
        (7, "NZ410"),
    ),
    case(
        "a loss cleaned only when there is nothing to average (an empty mask's 0/0)",
        """\
        import torch
        def masked_loss(pred, data, loss_function):
            mask = ~torch.isnan(data)
            loss = loss_function(data[mask], pred[mask])
            if data[mask].numel() == 0:
                loss = torch.nan_to_num(loss, 0)
            if not mask.any():
                loss = torch.where(torch.isnan(loss), torch.zeros_like(loss), loss)
            return loss
        """,
    ),
    case(
        "a masked loss clearing the NaN of masked-out zero targets (traffic-forecasting MAPE)",
        """\
        import torch
        def masked_mape_loss(y_pred, y_true):
            mask = (y_true != 0).float()
            mask /= mask.mean()
            loss = torch.abs((y_pred - y_true) / y_true)
            loss = loss * mask
            loss[loss != loss] = 0
            return loss.mean()
        """,
    ),
    case(
        "a loss cleaned of NaN with no mask applied to it",
        """\
        import torch
        def mape_loss(y_pred, y_true, mask):
            loss = torch.abs((y_pred - y_true) / y_true)
            loss[loss != loss] = 0
            return (loss * mask).mean()
        """,
        (4, "NZ105"),
    ),
    case(
        "a loss cleaned whenever there is something to average",
        """\
        import torch
        def masked_loss(pred, data, loss_function, n_valid):
            loss = loss_function(data, pred)
            if n_valid > 0:
                loss = torch.nan_to_num(loss, 0)
            return loss
        """,
        (5, "NZ101"),
    ),
    case(
        "a break out of the training loop itself ends the run",
        """\
        import tensorflow as tf
        def main(args):
            for batch in dataset.take(args.iters):
                with tf.GradientTape() as tape:
                    loss = model.loss(batch)
                if tf.math.is_nan(loss):
                    print("Loss was NaN, stopping!")
                    break
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """,
    ),
    case(
        "a search over the gradients that stops at the first bad one: one finding, at the zeroing",
        """\
        import torch
        class Model(LightningModule):
            def on_after_backward(self):
                valid_gradients = True
                for name, param in self.named_parameters():
                    if param.grad is not None:
                        valid_gradients = not torch.isnan(param.grad).any()
                        if not valid_gradients:
                            break
                if not valid_gradients:
                    self.zero_grad()
        """,
        (11, "NZ201"),
    ),
    case(
        "an unroll that ends on a non-finite loss and hands that loss to its caller",
        """\
        import tensorflow as tf
        def unroll(self, state, batches):
            loss = 0.0
            for batch in batches:
                objective, state = self._inner_step(state, batch)
                loss += objective
                if not tf.math.is_finite(loss):
                    break
            return loss, state
        """,
    ),
    case(
        "a break out of one epoch's loop: the next epoch trains on",
        """\
        import torch
        def train(model, loader, optimizer, epoch):
            for batch in loader:
                loss = model(batch)
                if torch.isnan(loss):
                    break
                loss.backward()
                optimizer.step()
        """,
        (6, "NZ201"),
    ),
    case(
        "a break out of a loop that a loop in the same file calls again",
        """\
        import torch
        def fit_once(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                if torch.isnan(loss):
                    break
                loss.backward()
                optimizer.step()
        def main():
            for _ in range(10):
                fit_once(model, loader, optimizer)
        """,
        (6, "NZ201"),
    ),
    case(
        "a GP kernel's length_scale is no loss scale: the skip is the code's own",
        """\
        import tensorflow as tf
        def fit(kernel, optimizer, steps):
            for _ in range(steps):
                with tf.GradientTape() as tape:
                    loss = -gp_log_prob(kernel)
                grads = tape.gradient(loss, [kernel.length_scale])
                if all(tf.reduce_all(tf.math.is_finite(g)) for g in grads):
                    optimizer.apply_gradients(zip(grads, [kernel.length_scale]))
                kernel.length_scale.assign(tf.maximum(kernel.length_scale, 1e-3))
        """,
        (7, "NZ201"),
    ),
    case(
        "an optimizer's step that leaves mid-update on a NaN gradient, handing a flag back",
        """\
        import torch
        class SGD(torch.optim.Optimizer):
            def step(self, closure=None):
                for group in self.param_groups:
                    for p in group["params"]:
                        if True in torch.isnan(p.grad):
                            return True, None
                        p.add_(p.grad, alpha=-group["lr"])
                return False, None
        """,
        (7, "NZ201"),
    ),
    case(
        "a loss function returning a constant when the predictions are not finite",
        """\
        import tensorflow as tf
        def safe_dice_loss(y_true, y_pred):
            if tf.reduce_any(tf.math.is_nan(y_pred)):
                return tf.constant(1.0)
            return dice_loss(y_true, y_pred)
        """,
        (4, "NZ201"),
    ),
    case(
        "a loss function leaving out samples whose labels are missing (NaN targets)",
        """\
        import torch
        def masked_mse_loss(pred, target):
            valid = ~torch.isnan(target)
            return ((pred[valid] - target[valid]) ** 2).mean()
        """,
    ),
    *opt_in_or_not(
        "apex amp.scale_loss (its patched step skips on overflow)",
        """\
        from apex import amp
        def train(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for batch in loader:
                loss = model(batch)
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
        """,
        every_rule=[(6, "NZ406")],
    ),
    *opt_in_or_not(
        "a scale_loss that is not apex's (a wrapper scaling by a constant)",
        """\
        class Wrapper:
            def scale_loss(self, loss):
                return loss * self.factor
            def update(self, loss):
                loss = self.scale_loss(loss)
                loss.backward()
                self.optimizer.step()
        """,
    ),
    # ---- TF / Keras -----------------------------------------------------------------
    case(
        "the optimizer's moments cleaned of NaN in place (torch optimizer.state)",
        """\
        import torch
        def repair(self):
            for state in self.optimizer.state.values():
                for value in state.values():
                    if torch.is_tensor(value) and not torch.isfinite(value).all():
                        value.nan_to_num_(nan=0.0)
        """,
        (6, "NZ101"),
    ),
    case(
        "a check whose branch cleans the gradients in place: one finding, at the cleaning",
        """\
        import torch
        def train_step(self, batch):
            self.loss(batch).backward()
            for p in self.model.parameters():
                if not torch.isfinite(p.grad).all():
                    p.grad.nan_to_num_(nan=0.0)
            self.optimizer.step()
        """,
        (6, "NZ101"),
    ),
    case(
        "a scheduler's state is no optimizer state",
        """\
        import torch
        def describe(self):
            for value in self.scheduler.state.values():
                value = torch.nan_to_num(value)
                print(value)
        """,
    ),
    case(
        "keras train_step zeroing NaN in the trainable variables after the step",
        """\
        import tensorflow as tf
        class Model(tf.keras.Model):
            def train_step(self, data):
                grads = self.compute_grads(data)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                for var in self.trainable_variables:
                    var.assign(tf.where(tf.math.is_nan(var), tf.zeros_like(var), var))
                return {"loss": self.loss_tracker.result()}
        """,
        (7, "NZ103"),
    ),
    case(
        "keras train_step returns early",
        """\
        import tensorflow as tf
        class Model(tf.keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = self.compiled_loss(y, self(x, training=True))
                if tf.math.is_nan(loss):
                    return {"loss": loss}
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                return {"loss": loss}
        """,
        (8, "NZ201"),
    ),
    case(
        "a jax cond that only prints a warning on non-finite gradients",
        """\
        import jax
        import jax.numpy as jnp
        def train_step(state, grad):
            for name, g in flatten(grad).items():
                jax.lax.cond(
                    jnp.any(~jnp.isfinite(g)),
                    lambda: jax.debug.print("non-finite grads"),
                    lambda: None,
                )
            return state.apply_gradients(grads=grad)
        """,
    ),
    case(
        "tf.cond keeps the old variables",
        """\
        import tensorflow as tf
        def apply(grads, variables, optimizer):
            ok = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            return tf.cond(ok, lambda: optimizer.apply_gradients(zip(grads, variables)), tf.no_op)
        """,
        (4, "NZ410"),
    ),
    case(
        "tf.where zeroes NaN gradients",
        """\
        import tensorflow as tf
        grads = [tf.where(tf.math.is_nan(g), tf.zeros_like(g), g) for g in grads]
        """,
        (2, "NZ103"),
    ),
    case(
        "tf.debugging.check_numerics raises",
        """\
        import tensorflow as tf
        loss = tf.debugging.check_numerics(loss, "loss")
        """,
    ),
    case(
        "keras LossScaleOptimizer finiteness check, every rule on",
        """\
        import tensorflow as tf
        class Scaled(tf.keras.mixed_precision.LossScaleOptimizer):
            def apply_gradients(self, grads, variables):
                finite = self.check_finite(grads)
                return tf.cond(finite, lambda: self.inner.apply(grads, variables), lambda: None)
        """,
        (5, "NZ406"),
        every_rule=True,
    ),
    # ---- Lightning ------------------------------------------------------------------
    case(
        "lightning hook clears non-finite gradients",
        """\
        import torch
        import lightning as L
        class Module(L.LightningModule):
            def on_before_optimizer_step(self, optimizer):
                norms = [p.grad.norm() for p in self.parameters() if p.grad is not None]
                if not torch.isfinite(torch.stack(norms)).all():
                    optimizer.zero_grad()
        """,
        (7, "NZ201"),
    ),
    case(
        "lightning training_step returning None on NaN",
        """\
        import torch
        import lightning as L
        class Module(L.LightningModule):
            def training_step(self, batch, batch_idx):
                loss = self.loss_fn(self(batch))
                if torch.isnan(loss):
                    return None
                return loss
        """,
        (7, "NZ201"),
    ),
    case(
        "lightning validation only observes",
        """\
        import torch
        import lightning as L
        class Module(L.LightningModule):
            def validation_step(self, batch, batch_idx):
                self.eval()
                with torch.no_grad():
                    val_loss = self.loss_fn(self(batch))
                if torch.isnan(val_loss):
                    return None
                self.log("val_loss", val_loss)
        """,
    ),
    # ---- Hugging Face ---------------------------------------------------------------
    case(
        "nan_inf_filter style running-average substitution",
        """\
        import torch
        def inner_loop(self, args, tr_loss, tr_loss_step):
            bad = torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)
            if args.logging_nan_inf_filter and bad:
                tr_loss = tr_loss + tr_loss / (1 + self.state.global_step)
            else:
                tr_loss = tr_loss + tr_loss_step
            return tr_loss
        """,
        (5, "NZ106"),
    ),
    case(
        "nan filter switch on by default in a config class",
        """\
        from dataclasses import dataclass, field
        @dataclass
        class Arguments:
            logging_nan_inf_filter: bool = field(default=True)
        """,
        (4, "NZ405"),
    ),
    case(
        "nan filter switch off by default",
        """\
        from dataclasses import dataclass, field
        @dataclass
        class Arguments:
            logging_nan_inf_filter: bool = field(default=False)
        """,
    ),
    *opt_in_or_not(
        "CTC zero_infinity",
        """\
        import torch
        criterion = torch.nn.CTCLoss(blank=0, zero_infinity=True)
        """,
        every_rule=[(2, "NZ407")],
    ),
    case(
        "evaluation loop replacing NaN metrics",
        """\
        import torch
        def evaluate(model, loader):
            model.eval()
            scores = []
            with torch.no_grad():
                for batch in loader:
                    loss = model(batch).loss
                    if torch.isnan(loss):
                        continue
                    scores.append(loss.item())
            return sum(scores) / len(scores)
        """,
    ),
    # ---- metrics derived from predictions, norms for reports: observations ----------
    case(
        "numpy metric of a prediction from params, NaN heads reported as None",
        """\
        import math
        def evaluate(params, split):
            ap = average_precision(predict(params, split.cls), split.labels)
            return {h: float(v) if math.isfinite(v) else None for h, v in zip(split.heads, ap)}
        """,
    ),
    case(
        "sklearn score of model output replaced by 0.0",
        """\
        import numpy as np
        from sklearn.metrics import roc_auc_score
        def summary(params, x, y):
            auc = roc_auc_score(y, np.asarray(apply_fn(params, x)))
            return np.where(np.isnan(auc), 0.0, auc)
        """,
    ),
    case(
        "torchmetrics-style metric object of logits",
        """\
        import torch
        def validation_step(self, batch):
            logits = self.model(batch.x)
            self.f1.update(logits, batch.y)
            value = self.f1.compute()
            return torch.where(torch.isnan(value), torch.zeros_like(value), value)
        """,
    ),
    case(
        "keras metric result of predictions",
        """\
        import tensorflow as tf
        def report(model, x, y):
            precision = tf.keras.metrics.Precision()
            precision.update_state(y, model(x))
            result = precision.result()
            return tf.where(tf.math.is_nan(result), 0.0, result)
        """,
    ),
    case(
        "jax perplexity of the eval loss",
        """\
        import jax.numpy as jnp
        def eval_summary(params, batch):
            ppl = perplexity(model_apply(params, batch))
            return jnp.where(jnp.isfinite(ppl), ppl, 0.0)
        """,
    ),
    case(
        "parameter norm for a report, None when non-finite",
        """\
        import math
        import optax
        def report(params):
            norm = float(optax.global_norm(params))
            return norm if math.isfinite(norm) else None
        """,
    ),
    case(
        "torch gradient norm logged as None",
        """\
        import math
        import torch
        def log_norm(model, writer):
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
            writer.add_scalar("grad_norm", norm if math.isfinite(norm) else None)
        """,
    ),
    case(
        "nan_to_num on the training loss beside a logged accuracy is still reported",
        """\
        import torch
        def training_step(self, batch):
            logits = self.model(batch.x)
            accuracy = (logits.argmax(-1) == batch.y).float().mean()
            self.log("acc", accuracy)
            loss = torch.nn.functional.cross_entropy(logits, batch.y)
            return torch.nan_to_num(loss)
        """,
        (7, "NZ101"),
    ),
    case(
        "where(isfinite(loss), loss, 0.) in a step beside a metric is still reported",
        """\
        import jax, jax.numpy as jnp
        def train_step(params, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            acc = accuracy(predict(params, batch.x), batch.y)
            loss = jnp.where(jnp.isfinite(loss), loss, 0.0)
            return params, loss, acc
        """,
        (5, "NZ103"),
    ),
    case(
        "keeping old params still reported when a metric is computed beside it",
        """\
        import math
        for batch in loader:
            new_params, loss = update(params, batch)
            score = accuracy_score(batch.y, predict(new_params, batch.x))
            params = new_params if math.isfinite(loss) else params
        """,
        (5, "NZ410"),
    ),
    case(
        "a loss replaced by a converted value is still reported",
        """\
        import torch
        loss = torch.where(torch.isfinite(loss), loss, torch.tensor(0.0))
        """,
        (2, "NZ103"),
    ),
    case(
        "a gradient norm that skips the step is still reported",
        """\
        import math
        import torch
        for batch in loader:
            model(batch).loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
            if not math.isfinite(norm):
                optimizer.zero_grad()
                continue
            optimizer.step()
        """,
        (7, "NZ201"),
    ),
    # ---- DeepSpeed / fairseq fp16 ---------------------------------------------------
    *opt_in_or_not(
        "deepspeed-style overflow skip",
        """\
        class FP16Optimizer:
            def step(self):
                self.overflow = self.overflow_checker.check_using_norm(self.norm_groups())
                if self.overflow:
                    self._update_scale(True)
                    return self.overflow
                self.optimizer.step()
                return self.overflow
        """,
        every_rule=[(6, "NZ406")],
    ),
    case(
        "overflow flag set in another method of the class",
        """\
        class ZeroOptimizer:
            def check_overflow(self):
                self.overflow = self.has_overflow(self.partitions)

            def step(self):
                self.check_overflow()
                self._update_scale(self.overflow)
                if self.overflow:
                    self.zero_grad(set_to_none=True)
                    return
                self.optimizer.step()
        """,
        (9, "NZ406"),
        every_rule=True,
    ),
    case(
        "fairseq-style OverflowError handler, every rule on",
        """\
        def train_step(self, samples):
            try:
                grad_norm = self.clip_grad_norm(self.cfg.clip_norm)
                self.optimizer.step()
            except OverflowError:
                logger.info("loss scale %s", self.optimizer.scaler.loss_scale)
                self.zero_grad()
        """,
        (7, "NZ406"),
        every_rule=True,
    ),
    case(
        "OverflowError handler with no scaler in sight",
        """\
        def train_step(self, samples):
            try:
                grad_norm = self.clip_grad_norm(self.cfg.clip_norm)
                self.optimizer.step()
            except OverflowError:
                self.zero_grad()
        """,
        (6, "NZ201"),
    ),
    case(
        "grad scaler used as documented",
        """\
        import torch
        scaler = torch.cuda.amp.GradScaler()
        for batch in loader:
            with torch.autocast("cuda"):
                loss = model(batch)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        """,
    ),
    case(
        "found_inf from unscaling skips the step, every rule on",
        """\
        import torch
        class GradScaler:
            def step(self, optimizer):
                found_inf = self._unscale_grads(optimizer)
                if found_inf.item():
                    return None
                optimizer.step()
        """,
        (6, "NZ406"),
        every_rule=True,
    ),
    case(
        "NaN detector hooks only observe",
        """\
        import torch
        class NanDetector:
            def __exit__(self, *exc):
                for name, param in self.named_parameters:
                    norm = torch.norm(param.grad)
                    if torch.isnan(norm).any():
                        self.bad[name] = norm.item()
                if self.bad:
                    print("non-finite gradient norms", self.bad)
        """,
    ),
    case(
        "Hessian eigenvalue diagnostic cleans its products",
        """\
        import torch
        class Eigenvalue:
            def estimate(self, loss, params, iterations):
                grads = torch.autograd.grad(loss, params, create_graph=True)
                v = [torch.randn_like(p) for p in params]
                stats = {}
                for _ in range(iterations):
                    hv = torch.autograd.grad(grads, params, grad_outputs=v, retain_graph=True)
                    hv = [torch.nan_to_num(h, nan=0.0, posinf=0.0, neginf=0.0) for h in hv]
                    stats.update(value=sum((h * u).sum() for h, u in zip(hv, v)).item())
                return stats
        """,
    ),
    case(
        "grad norm sentinel for the caller",
        """\
        import torch
        def get_grad_norm(params):
            total_norm = sum(p.grad.norm() ** 2 for p in params) ** 0.5
            if total_norm == float("inf") or total_norm != total_norm:
                total_norm = -1
            return total_norm
        """,
    ),
    # ---- fp16 loss scaling is decided by a scaler at work, not by a flag's name ------
    *(
        case(
            f"found_inf named flag in a plain loop: clear zero-and-continue{suffix}",
            """\
            import torch
            def train(model, opt, loader):
                for x, y in loader:
                    loss = model(x, y)
                    if torch.isnan(loss):
                        continue
                    loss.backward()
                    found_inf = any(not torch.isfinite(p.grad).all() for p in model.parameters())
                    if found_inf:
                        opt.zero_grad()
                        continue
                    opt.step()
            """,
            (6, "NZ201"),
            (10, "NZ201"),
            every_rule=every_rule,
        )
        for suffix, every_rule in (("", False), (", every rule on", True))
    ),
    *(
        case(
            f"the same loop driven by a GradScaler{suffix}",
            """\
            import torch
            def train(model, opt, loader, scaler):
                for x, y in loader:
                    loss = model(x, y)
                    if torch.isnan(loss):
                        continue
                    scaler.scale(loss).backward()
                    found_inf = any(not torch.isfinite(p.grad).all() for p in model.parameters())
                    if found_inf:
                        opt.zero_grad()
                        continue
                    scaler.step(opt)
                    scaler.update()
            """,
            *expected,
            every_rule=every_rule,
        )
        # the scaler skips overflowing gradients at its own step; a skip of the loop's own
        # that passes over the scaler's step and update is the code's (the scaler never
        # hears of the overflow, and the skip runs without fp16 too), as is a NaN loss's
        for suffix, expected, every_rule in (
            ("", ((6, "NZ201"), (10, "NZ201")), False),
            (", every rule on", ((6, "NZ201"), (10, "NZ201"), (12, "NZ406")), True),
        )
    ),
    *(
        case(
            f"DeepSpeed-style: the scale is lowered in another method{suffix}",
            """\
            class FP16Optimizer:
                def step(self):
                    self.overflow = self.overflow_checker.check_using_norm(self.norms)
                    if self.overflow:
                        return self.overflow
                    self.optimizer.step()

                def lower_scale(self, skip):
                    if skip:
                        self.cur_scale = max(self.cur_scale / self.scale_factor, self.min_scale)
            """,
            *expected,
            every_rule=every_rule,
        )
        for suffix, expected, every_rule in (
            ("", (), False),
            (", every rule on", ((5, "NZ406"),), True),
        )
    ),
    *(
        case(
            f"flax DynamicScale is_fin keeps the old state{suffix}",
            """\
            import jax
            import jax.numpy as jnp
            def train_step(state, batch):
                grad_fn = state.dynamic_scale.value_and_grad(loss_fn)
                dynamic_scale, is_fin, loss, grads = grad_fn(state.params, batch)
                new = state.apply_gradients(grads=grads)
                kept = jax.tree.map(lambda n, o: jnp.where(is_fin, n, o), new.params, state.params)
                return new.replace(params=kept, dynamic_scale=dynamic_scale)
            """,
            *expected,
            every_rule=every_rule,
        )
        for suffix, expected, every_rule in (
            ("", (), False),
            (", every rule on", ((7, "NZ406"),), True),
        )
    ),
    case(
        "JAX is_fin from a plain helper, no dynamic scale: the old state is kept",
        """\
        import jax
        import jax.numpy as jnp
        import optax
        def train_step(params, opt_state, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, opt_state = tx.update(grads, opt_state, params)
            is_fin = grads_are_finite(grads)
            new_params = optax.apply_updates(params, updates)
            params = jax.tree.map(lambda n, o: jnp.where(is_fin, n, o), new_params, params)
            return params, opt_state
        """,
        (9, "NZ410"),
    ),
    case(
        "found_inf from an opaque call, no scale adjusted",
        """\
        class Optimizer:
            def step(self):
                found_inf = self.scaler.unscale_grads(self.optimizer)
                if found_inf:
                    self.zero_grad()
                self.optimizer.step()
        """,
        (5, "NZ201"),
    ),
    case(
        "keras finiteness check outside a LossScaleOptimizer",
        """\
        import tensorflow as tf
        class Scaled:
            def apply_gradients(self, grads, variables):
                finite = self.check_finite(grads)
                return tf.cond(finite, lambda: self.inner.apply(grads, variables), lambda: None)
        """,
        (5, "NZ410"),
    ),
    case(
        "TF overflow flag with no loss scale: the step is skipped",
        """\
        import tensorflow as tf
        def train_step(model, optimizer, x, y):
            with tf.GradientTape() as tape:
                loss = model.compiled_loss(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            overflow = not all(tf.reduce_all(tf.math.is_finite(g)) for g in grads)
            if overflow:
                return loss
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        """,
        (8, "NZ201"),
    ),
    *(
        case(
            f"TF overflow flag under a LossScaleOptimizer's scaled loss{suffix}",
            """\
            import tensorflow as tf
            def train_step(model, optimizer, x, y):
                with tf.GradientTape() as tape:
                    loss = model.compiled_loss(y, model(x))
                    scaled = optimizer.get_scaled_loss(loss)
                grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.weights))
                overflow = not all(tf.reduce_all(tf.math.is_finite(g)) for g in grads)
                if overflow:
                    return loss
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            """,
            *expected,
            every_rule=every_rule,
        )
        for suffix, expected, every_rule in (
            ("", (), False),
            (", every rule on", ((9, "NZ406"),), True),
        )
    ),
    case(
        "accelerate's skip report holds the scheduler, every rule on",
        """\
        def train(self, loader):
            for batch in loader:
                self.accelerator.backward(self.compute_loss(batch))
                self.optimizer.step()
                if not self.accelerator.optimizer_step_was_skipped:
                    self.lr_scheduler.step()
        """,
        (5, "NZ406"),
        every_rule=True,
    ),
    # ---- a model's outputs cleaned on their way to the loss ---------------------------
    case(
        "torch module: logits cleaned right before the BCE loss",
        """\
        import torch
        import torch.nn.functional as F
        class AudioClassifier(torch.nn.Module):
            def forward(self, source, label=None):
                x = self.encoder(source)["x"]
                x = self.proj(x)
                if label is None:
                    return torch.sigmoid(x)
                x = torch.nan_to_num(x)
                loss = F.binary_cross_entropy_with_logits(x, label.float(), reduction="none")
                return {"losses": {"main": loss}}
        """,
        (9, "NZ101"),
    ),
    case(
        "flax loss_fn: logits from apply cleaned before the cross-entropy",
        """\
        import jax.numpy as jnp
        import optax
        def loss_fn(params, batch):
            logits = state.apply_fn({"params": params}, batch["image"])
            logits = jnp.nan_to_num(logits)
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
        """,
        (5, "NZ101"),
    ),
    case(
        "HF style: outputs.logits masked with where(isnan) before the criterion",
        """\
        import torch
        def compute_loss(model, inputs):
            outputs = model(**inputs)
            logits = outputs.logits
            logits = torch.where(torch.isnan(logits), torch.zeros_like(logits), logits)
            return torch.nn.functional.cross_entropy(logits, inputs["labels"])
        """,
        (5, "NZ103"),
    ),
    case(
        "inputs and labels cleaned before the model: input cleaning",
        """\
        import torch
        def train_step(model, batch, criterion):
            x = torch.nan_to_num(batch["x"])
            y = torch.nan_to_num(batch["y"])
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
        """,
    ),
    case(
        "a forward's input cleaned before its layers (the parameter is re-bound later)",
        """\
        import torch
        class Body(torch.nn.Module):
            def forward(self, x, y):
                x = torch.nan_to_num(x)
                x = self.layer(x)
                return self.criterion(x, y)
        """,
    ),
    case(
        "predictions cleaned for a metric, not a loss",
        """\
        import torch
        def accuracy_of(model, x, y):
            preds = model(x)
            preds = torch.nan_to_num(preds)
            return (preds.argmax(-1) == y).float().mean()
        """,
    ),
    case(
        "keras: y_pred cleaned before the loss object",
        """\
        import tensorflow as tf
        class Model(tf.keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    y_pred = self(x, training=True)
                    y_pred = tf.where(tf.math.is_nan(y_pred), tf.zeros_like(y_pred), y_pred)
                    loss = self.compiled_loss(y, y_pred)
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        """,
        (7, "NZ103"),
    ),
    # ---- words that look like overflow and are not ------------------------------------
    case(
        "a tokenizer's OverflowError on a bad token id, beside a decode step",
        """\
        class Detokenizer:
            def next_piece(self, token_id):
                try:
                    piece = self._stream.step(self._tokenizer, token_id)
                except (OverflowError, TypeError):
                    logger.exception("invalid token id %r", token_id)
                    return ""
                return piece
        """,
    ),
    case(
        "perplexity from a finite loss overflows exp inside the training loop",
        """\
        import math
        def train(model, loader, optimizer, eval_loss):
            for batch in loader:
                loss = model(batch).loss
                loss.backward()
                optimizer.step()
            try:
                perplexity = math.exp(eval_loss)
            except OverflowError:
                perplexity = float("inf")
            logger.info("perplexity %s", perplexity)
        """,
    ),
    case(
        "a kernel's buffer-overflow counter read from memory",
        """\
        import triton.language as tl
        def copy_kernel(overflow_ptr, n_ptr, dst_ptr):
            overflow = tl.load(overflow_ptr)
            n = tl.load(n_ptr)
            if overflow == 1:
                return
            tl.store(dst_ptr, n)
        """,
    ),
    case(
        "an overflow counter reset, and asked whether it exists",
        """\
        import torch
        class StashManager:
            def allocate(self):
                if self.overflow is None:
                    self.overflow = torch.zeros(1, dtype=torch.int64)
                else:
                    self.overflow.zero_()
            def reset(self, model):
                if self.stash.overflow is not None:
                    self.stash.overflow.zero_()
        """,
    ),
    case(
        "a flag asked whether it is set yet (`is None`), not what it holds",
        """\
        def step(self, batch):
            loss = self.model(batch)
            if self.found_inf is not None:  # a scaler is attached: it steps for us
                return loss
            loss.backward()
            self.optimizer.step()
        """,
    ),
    case(
        "a counter zeroed on overflow clears no gradient: training goes on",
        """\
        def train(model, loader, optimizer, checker, stats):
            for batch in loader:
                model(batch).loss.backward()
                found_inf = checker.check(model)
                if found_inf:
                    stats.zero_()
                optimizer.step()
        """,
        (5, "NZ202"),
    ),
    # ---- a flag looked up in a state, not returned by a call ---------------------------
    *opt_in_or_not(
        "an optimizer step returns early on its grad scaler's found_inf",
        """\
        import torch
        class FusedAdam(torch.optim.Optimizer):
            def step(self, closure=None, *, grad_scaler: torch.amp.GradScaler | None = None):
                if grad_scaler is not None:
                    state = grad_scaler._per_optimizer_states[id(self)]
                    found_inf = state["found_inf_per_device"][self.device]
                    if found_inf.item():
                        return
                self._apply_updates()
        """,
        every_rule=[(8, "NZ406")],
    ),
    case(
        "an optimizer step returns early on a found_inf looked up in its own state",
        """\
        import torch
        class GuardedAdam(torch.optim.Optimizer):
            def step(self, closure=None):
                found_inf = self.state["found_inf"]
                if found_inf.item():
                    return
                self._apply_updates()
        """,
        (6, "NZ201"),
    ),
    case(
        "an overflow count looked up by a report that trains nothing",
        """\
        def summarize(stats):
            overflow = stats["overflow"]
            if overflow:
                return "saturated"
            return "ok"
        """,
    ),
    case(
        "a NaN loss replaced by nan_to_num after a test of it: one site, one finding",
        """\
        import torch
        def forward(self, prediction, labels):
            masked_lm_loss = self.ce_loss(prediction, labels)
            if torch.isnan(masked_lm_loss):
                warnings.warn("NaN in masked_lm_loss, replaced with 0")
                masked_lm_loss = torch.nan_to_num(masked_lm_loss, nan=0.0)
            return masked_lm_loss
        """,
        (6, "NZ101"),
    ),
    case(
        "a size named for parameters is no training signal (an offload planner's search)",
        """\
        class Planner:
            def cost(self, region):
                extra = 2.0 * self.transfer_time(region.param_size)
                return (float("inf"),) if extra == 0 else (region.saving / extra,)
            def plan(self):
                while self.peak > self.budget:
                    for region in self.regions:
                        profit = self.cost(region)
                        if profit[0] == float("inf"):
                            break
                    self.update_state(region)
        """,
    ),
    case(
        "a search that fills an overflow flag and breaks; the step skipped on it later",
        """\
        import torch
        import torch.distributed as dist
        def has_inf_or_nan(tensor):
            return not torch.isfinite(tensor).all()
        class FP16Optimizer:
            def _check_overflow(self):
                self._found_overflow.fill_(0.0)
                for group in self._optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is not None and has_inf_or_nan(p.grad):
                            self._found_overflow.fill_(1.0)
                            break
                dist.all_reduce(self._found_overflow)
                return self._found_overflow.item() > 0
            def step(self):
                found_inf = self._check_overflow()
                if found_inf:
                    self._optimizer.zero_grad()
                    return False
                self._optimizer.step()
                return True
        """,
        (18, "NZ201"),
    ),
    case(
        "non-finite per-utterance losses dropped by indexing, summed a line later",
        """\
        import torch
        def forward(self, ctc_output, targets, lengths):
            ctc_loss = self.ctc(ctc_output, targets, lengths, reduction="none")
            ctc_loss_is_finite = torch.isfinite(ctc_loss)
            ctc_loss = ctc_loss[ctc_loss_is_finite]
            ctc_loss = ctc_loss.sum()
            return ctc_loss
        """,
        (5, "NZ107"),
    ),
    case(
        "non-finite losses dropped only when some are, raising when all are: one finding",
        """\
        import torch
        def compute_loss(model, batch):
            simple_loss, pruned_loss = model(batch, reduction="none")
            simple_loss_is_finite = torch.isfinite(simple_loss)
            pruned_loss_is_finite = torch.isfinite(pruned_loss)
            if not torch.all(simple_loss_is_finite & pruned_loss_is_finite):
                logging.info("Not all losses are finite!")
                simple_loss = simple_loss[simple_loss_is_finite]
                pruned_loss = pruned_loss[pruned_loss_is_finite]
                if torch.all(~simple_loss_is_finite):
                    raise ValueError("every utterance of the batch has an inf or nan loss")
            return simple_loss.sum() + pruned_loss.sum()
        """,
        (8, "NZ107"),
    ),
    case(
        "a learning-rate finder's analysis leaves the diverged trials out of its suggestion",
        """\
        import torch
        def suggestion(self):
            losses = torch.tensor(self.results["loss"])
            lrs = torch.tensor(self.results["lr"])
            is_finite = torch.isfinite(losses)
            losses = losses[is_finite]
            lrs = lrs[is_finite]
            best = torch.argmin(torch.gradient(losses, spacing=[lrs])[0]).item()
            return self.results["lr"][best]
        """,
    ),
    case(
        "finite samples of a metric kept for its report",
        """\
        import torch
        def report(scores):
            finite = torch.isfinite(scores)
            scores = scores[finite]
            return scores.mean()
        """,
    ),
    case(
        "the NaN self-test on a Python number (loss.item() != loss.item()) skips the batch",
        """\
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                if loss.item() != loss.item():
                    continue
                loss.backward()
                optimizer.step()
        """,
        (5, "NZ201"),
    ),
    case(
        "two different numbers compared is no self-test",
        """\
        def train(model, loader, optimizer, best):
            for batch in loader:
                loss = model(batch)
                if loss.item() != best.item():
                    continue
                loss.backward()
                optimizer.step()
        """,
    ),
    case(
        "a custom optax transform zeroes the updates when any leaf is not finite",
        """\
        import jax
        import jax.numpy as jnp
        import optax
        def zero_nonfinite():
            def update_fn(updates, state, params=None):
                leaves = jax.tree.leaves(updates)
                finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(u)) for u in leaves]))
                updates = jax.tree.map(lambda u: jnp.where(finite, u, jnp.zeros_like(u)), updates)
                return updates, state
            return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)
        """,
        (8, "NZ103"),
    ),
    *opt_in_or_not(
        "an if/elif chain over two overflow flags: one finding, on the branch that only logs",
        """\
        def train_rlhf(self, loss):
            self.actor.backward(loss)
            actor_overflow = self.actor.optimizer.check_overflow()
            critic_overflow = self.critic.optimizer.check_overflow()
            if actor_overflow and not critic_overflow:
                self.critic.optimizer.skip_step = True
            elif not actor_overflow and critic_overflow:
                self.actor.optimizer.skip_step = True
            elif actor_overflow and critic_overflow:
                print("overflow: skipping both steps")
            self.actor.step()
            self.critic.step()
        """,
        every_rule=[(9, "NZ203")],
    ),
    case(
        "a gradient clipper's step leaves an infinite norm unclipped",
        """\
        class GradientClipper:
            def step(self, parameters):
                grads = [p.grad for p in parameters if p.grad is not None]
                total_norm = self.l2norm(grads).item()
                if total_norm == float("inf"):
                    return
                coef = self.max_norm / (total_norm + 1e-6)
                if coef < 1:
                    self.scale(grads, coef)
        """,
    ),
    case(
        "an optimizer's step returns early on an infinite norm",
        """\
        class GuardedSGD:
            def step(self, parameters):
                grads = [p.grad for p in parameters if p.grad is not None]
                total_norm = self.l2norm(grads).item()
                if total_norm == float("inf"):
                    return
                self.apply(grads)
        """,
        (6, "NZ201"),
    ),
    *opt_in_or_not(
        "with a scaler the scaler skips; without one the code zeroes the gradients itself",
        """\
        import torch
        class Actor:
            def optimizer_step(self):
                if self.scaler is not None:
                    self.scaler.unscale_(self.optimizer)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1.0)
                if self.scaler is not None:
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    if not torch.isfinite(grad_norm):
                        self.optimizer.zero_grad()
                    else:
                        self.optimizer.step()
        """,
        default=[(12, "NZ201")],
        every_rule=[(8, "NZ406"), (12, "NZ201")],
    ),
    case(
        "two gradients cleaned in one statement: one finding",
        """\
        def merge(a, b):
            grad = a.grad.nan_to_num(0.0) + b.grad.nan_to_num(0.0)
            return grad
        """,
        (2, "NZ101"),
    ),
    case(
        "a flag handed back in a tuple gates a zero fill of the updates (paxml's skip step)",
        """\
        import jax
        import jax.numpy as jnp
        class Learner:
            def scale_gradients(self, raw_grads):
                def keep_step(grad_norm):
                    return jnp.all(jnp.isfinite(grad_norm))
                raw_grad_norm = compute_norm(raw_grads)
                valid_step = keep_step(raw_grad_norm)
                return clip(raw_grads, raw_grad_norm), valid_step
            def update_states(self, grads, states, old_vars):
                grads, valid_step = self.scale_gradients(grads)
                updates, new_states = self.tx.update(grads, states, old_vars)
                updates = jax.tree.map(
                    lambda x: jnp.where(valid_step, x, jnp.zeros_like(x)), updates
                )
                return updates, new_states
        """,
        (13, "NZ106"),
    ),
    case(
        "a mask of missing labels, returned by a helper, zeroes their loss terms",
        """\
        import jax
        import jax.numpy as jnp
        def get_valid_mask(labels):
            return ~jnp.isnan(labels)
        def train_step(state, batch):
            def loss_fn(params):
                logits = state.apply_fn(params, batch)
                labels = batch["labels"]
                mask = get_valid_mask(labels)
                loss = bce(logits, labels, mask)
                return jnp.sum(jnp.where(mask, loss, 0)) / jnp.sum(mask), (loss, labels, mask)
            grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
            (_, (loss, labels, mask)), grads = grad_fn(state.params)
            return state.apply_gradients(grads=grads)
        """,
    ),
    case(
        "a clipping helper skips clipping a non-finite norm and hands the flag back",
        """\
        import numpy as np
        def clip_grad_global_norm(parameters, max_norm):
            total_norm = grad_global_norm(parameters)
            is_finite = bool(np.isfinite(total_norm))
            ratio = np.maximum(1, total_norm / max_norm)
            if not is_finite:
                warnings.warn("nan or inf is detected: clipping skipped")
                return total_norm, ratio, is_finite
            for p in parameters:
                p.grad *= 1 / ratio
            return total_norm, ratio, is_finite
        """,
    ),
    case(
        "a train step hands the flag back and skips the update it guards",
        """\
        import jax
        import optax
        def train_step(params, opt_state, batch):
            grads = jax.grad(loss_fn)(params, batch)
            finite = optax.tree.all_finite(grads)
            if not finite:
                return params, opt_state, finite
            updates, opt_state = tx.update(grads, opt_state)
            params = optax.apply_updates(params, updates)
            return params, opt_state, finite
        """,
        (7, "NZ201"),
    ),
    case(
        "an OverflowError of a curve fit in a trial assessor trains nothing",
        """\
        from scipy import optimize
        class Assessor:
            def fit_theta(self):
                x = range(1, self.point_num + 1)
                for model in self.models:
                    try:
                        a, b = optimize.curve_fit(model, x, self.trial_history)[0]
                    except (RuntimeError, FloatingPointError, OverflowError):
                        pass
        """,
    ),
    case(
        "only finite loss terms are gathered into the sum",
        """\
        import torch
        def forward(self, targets, preds):
            losses = []
            for i in range(self.heads):
                loss = self.compute_loss_h(targets, preds, i)
                if not torch.isnan(loss):
                    losses.append(loss)
            return torch.stack(losses).sum()
        """,
        (6, "NZ107"),
    ),
    case(
        "a running average for the logs leaves non-finite losses out",
        """\
        import torch
        def update_average(self, loss, avg_loss):
            if torch.isfinite(loss):
                avg_loss -= avg_loss / self.step
                avg_loss += float(loss) / self.step
            return avg_loss
        """,
    ),
    # ---- a check helper whose caller drops the answer and steps -------------------------
    case(
        "a check that only warns, called between backward and the step (patience)",
        """\
        import torch
        class Brain:
            def fit_batch(self, batch):
                loss = self.compute_objectives(batch)
                loss.backward()
                self.check_loss_isfinite(loss)
                self.optimizer.step()
            def check_loss_isfinite(self, loss):
                if not torch.isfinite(loss):
                    self.nonfinite_count += 1
                    if self.nonfinite_count > self.patience:
                        raise ValueError("loss is not finite, patience exhausted")
                    logger.warning("patience not yet exhausted")
        """,
        (9, "NZ202"),
    ),
    *opt_in_or_not(
        "a check that only warns, called after the step in the batch loop",
        """\
        import torch
        class Trainer:
            def train(self, loader):
                for batch in loader:
                    loss = self.model(batch)
                    loss.backward()
                    self.optimizer.step()
                    self.report_loss(loss)
            def report_loss(self, loss):
                if torch.isnan(loss):
                    logger.warning("loss is nan")
        """,
        every_rule=[(10, "NZ203")],
    ),
    case(
        "a check that raises, and a warning used only in evaluation or after training",
        """\
        import torch
        def check_loss(loss):
            if not torch.isfinite(loss):
                raise FloatingPointError("non-finite loss")
        def warn_if_nan(loss):
            if torch.isnan(loss):
                print("nan")
        def evaluate(model, loader):
            for batch in loader:
                with torch.no_grad():
                    loss = model(batch)
                warn_if_nan(loss)
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                check_loss(loss)
                loss.backward()
                optimizer.step()
            warn_if_nan(loss)
        """,
    ),
    case(
        "a check whose answer the caller raises on",
        """\
        import math
        def loss_ok(loss):
            if not math.isfinite(loss):
                print("non-finite loss")
                return False
            return True
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                if not loss_ok(loss.item()):
                    raise RuntimeError("non-finite loss")
                loss.backward()
                optimizer.step()
        """,
    ),
    case(
        "a no_grad optimizer step reports the skip with a status tuple, every rule on",
        """\
        import torch
        class MixedPrecisionOptimizer:
            def _unscale_and_check(self, grads):
                self.found_inf.fill_(0.0)
                torch._amp_foreach_non_finite_check_and_unscale_(
                    grads, self.found_inf, self.grad_scaler.inv_scale
                )
                return self.found_inf.item() > 0
            @torch.no_grad()
            def step(self):
                found_inf_flag = self._unscale_and_check(self.main_grads())
                self.grad_scaler.update(found_inf_flag)
                if found_inf_flag:
                    return False, None, None
                success = self.step_with_ready_grads()
                return success, self.grad_norm, None
        """,
        (14, "NZ406"),
        every_rule=True,
    ),
    case(
        "a step that returns a status on NaN gradients, no scaler",
        """\
        import torch
        class Optimizer:
            @torch.no_grad()
            def step(self):
                bad = any(torch.isnan(p.grad).any() for p in self.params)
                if bad:
                    return False
                self.apply_updates()
                return True
        """,
        (7, "NZ201"),
    ),
    case(
        "a predicate that is not a step returns its answer",
        """\
        import torch
        def grads_are_bad(params):
            if any(torch.isnan(p.grad).any() for p in params):
                return True
            return False
        """,
    ),
    case(
        "a clipping coefficient's 0/0 guarded by the tensor method, NaN gradients still flow",
        """\
        import torch
        def clipped_coeff(weights, grad, threshold):
            max_norm = weights.norm().mul_(threshold)
            return max_norm.div_(grad.norm()).nan_to_num_(nan=1.0).clamp_(max=1.0)
        def clip(model, threshold):
            for p in model.parameters():
                p.grad.mul_(clipped_coeff(p.detach(), p.grad.detach(), threshold))
        """,
    ),
    case(
        "a gradient-noise-scale statistic leaves out overflowed gradients",
        """\
        import torch
        class GradientNoiseScale:
            def flatten_grads(self):
                grads = []
                for g in self.model.stored_gradients:
                    if g is not None and not g.isnan().any():
                        grads.append(g.flatten())
                    else:
                        return None
                return torch.cat(grads)
            def _sync(self, is_overflow):
                overflow = torch.tensor([is_overflow]).max().item()
                return overflow
            def _update(self):
                grad = self.flatten_grads()
                is_overflow = self._sync(grad is None)
                if is_overflow:
                    return
                self.buffer = grad
        """,
    ),
    case(
        "a buffer's overflow handed back by a helper, in code that does not train",
        """\
        import torch
        class Stash:
            def _sync(self, full):
                overflow = torch.tensor([full]).max().item()
                return overflow
            def pack(self, tensors, grad):
                for t in tensors:
                    if self._sync(grad is None):
                        continue
                    self.used += t.numel()
        """,
    ),
    case(
        "a NaN loss allowed only for an empty batch, asserted, in validation",
        """\
        import torch
        def loss_func(self, batch, loss_for_ub, validation_step):
            if validation_step and loss_for_ub.isnan():
                assert batch["loss_mask"].count_nonzero() == 0, "NaN loss with non-empty input"
                loss_sum_for_ub = torch.zeros_like(loss_for_ub)
            else:
                loss_sum_for_ub = batch["num_valid_tokens"] * loss_for_ub
            return loss_sum_for_ub
        """,
    ),
    case(
        "NeMo-style skip_nan_grad zeroes the step's gradients",
        """\
        import torch
        def on_after_backward(self):
            valid_gradients = True
            for name, param in self.named_parameters():
                if param.grad is not None:
                    ok = not (torch.isnan(param.grad).any() or torch.isinf(param.grad).any())
                    if not ok:
                        valid_gradients = False
                        break
            if not valid_gradients:
                self.zero_grad()
        """,
        (11, "NZ201"),
    ),
    case(
        "the loop is left with an error that is raised after cleanup",
        """\
        import numpy as np
        def train_and_evaluate(config, state, batches, writer):
            error = None
            for step, batch in enumerate(batches):
                state, loss = update(state, batch)
                if not np.isfinite(loss):
                    error = f"The loss became nan or inf at step {step}"
                    break
            writer.close()
            if error is not None:
                raise RuntimeError(error)
            return state
        """,
    ),
    case(
        "a quantization range check logs an overflow through lax.cond",
        """\
        import jax
        import jax.numpy as jnp
        def check_overflow(self, inputs, name):
            max_val, min_val = jnp.max(inputs), jnp.min(inputs)
            overflow = jnp.logical_or(max_val > self.limits.max_val, min_val < self.limits.min_val)
            def _true_fn(max_val, min_val):
                jax.debug.callback(log_overflow, max_val, min_val)
            def _false_fn(max_val, min_val):
                pass
            jax.lax.cond(overflow, _true_fn, _false_fn, max_val, min_val)
        """,
    ),
    case(
        "transitions with NaN observations are not added to the replay buffer",
        """\
        import torch
        def has_nan(observations, actions):
            return any(torch.isnan(t).any() for t in observations.values()) or bool(
                torch.isnan(actions).any()
            )
        def fill_buffer(transitions, replay_buffer):
            for transition in transitions:
                if has_nan(observations=transition["state"], actions=transition["action"]):
                    continue
                replay_buffer.add(**transition)
        """,
    ),
    case(
        "a same-file check of the gradients, called with keywords, skips the step",
        """\
        import torch
        def has_nan(grads):
            return any(torch.isnan(g).any() for g in grads)
        def train(model, loader, optimizer):
            for batch in loader:
                model(batch).loss.backward()
                grads = [p.grad for p in model.parameters()]
                if has_nan(grads=grads):
                    optimizer.zero_grad()
                    continue
                optimizer.step()
        """,
        (9, "NZ201"),
    ),
    case(
        "tokens marked with inf are left out of a search, and the marker is read back",
        """\
        import numpy as np
        def reduce_input(grads_mag, labels, beam_size):
            for idx, label in enumerate(labels):
                if label != "O":
                    grads_mag[idx] = float("inf")
            for _ in range(beam_size):
                smallest = np.argmin(grads_mag)
                if grads_mag[smallest] == float("inf"):
                    break
                grads_mag[smallest] = float("inf")
        """,
    ),
    case(
        "an inf gradient norm skips the step where nothing set it to inf",
        """\
        def train(model, loader, optimizer):
            for batch in loader:
                model(batch).loss.backward()
                grad_norm = clip_grads(model)
                if grad_norm == float("inf"):
                    optimizer.zero_grad()
                    continue
                optimizer.step()
        """,
        (6, "NZ201"),
    ),
    case(
        "a reference metric named a loss (sklearn's hamming loss) is no training loss",
        """\
        import numpy as np
        def _reference_sklearn_hamming_distance(preds, target, average):
            res = []
            for pred, true in zip(preds, target):
                if average == "micro":
                    res.append(_reference_sklearn_hamming_loss(true, pred))
                    continue
                per_class = 1 - confusion(true, pred).diagonal()
                per_class[np.isnan(per_class)] = 1.0
                per_class = per_class[np.bincount(pred) != 0]
                res.append(per_class)
            return res
        """,
    ),
    case(
        "an evaluator skips tasks whose metric is still NaN",
        """\
        def compute_metrics(self, metrics):
            out = {}
            for label, metric in metrics.items():
                loss = metric.compute()
                if loss.isnan().item():
                    continue
                out[label] = loss.item()
            return out
        """,
    ),
    case(
        "t5x-style skip_nan_updates keeps the old optimizer state",
        """\
        import jax.numpy as jnp
        def apply_param_gradient(self, step, hyper_params, param, state, grad):
            update_scale = hyper_params.learning_rate
            update_scale *= self.param_scale(param)
            new_param = param - update_scale * grad
            if hyper_params.skip_nan_updates:
                new_param = jnp.where(jnp.isnan(new_param), param, new_param)
            return new_param, state
        """,
        (7, "NZ410"),
    ),
    case(
        "loss weights normalised per sequence, their 0/0 set to 0",
        """\
        import jax.numpy as jnp
        def weights_of(loss_weights):
            norm_vec = jnp.sum(loss_weights, axis=-1, keepdims=True)
            loss_weights = jnp.nan_to_num(loss_weights / norm_vec, nan=0, posinf=0, neginf=0)
            return loss_weights
        """,
    ),
    case(
        "a nanargmax implementation marks all-NaN rows with -1, every rule on",
        """\
        import numpy as np
        def nanargmax(x, axis=None):
            nan_mask = np.isnan(x)
            return np.where(
                np.all(nan_mask, axis=axis), -1, np.nanargmax(np.where(nan_mask, -np.inf, x))
            )
        """,
        every_rule=True,
    ),
    case(
        "an op puts NaN back where an input was NaN",
        """\
        def arctan2(x1, x2):
            nan_mask = ops.logical_or(ops.is_nan(x1), ops.is_nan(x2))
            value_out = ops.select(cond, y, out)
            nan_value = ops.divide(zero_const, zero_const)
            return ops.select(nan_mask, nan_value, value_out)
        """,
    ),
    case(
        "skipped fp16 iterations counted from the optimizer's overflow, every rule on",
        """\
        def train_step(neox_args, model, data_iterator):
            loss = forward_backward(model, data_iterator)
            model.step()
            if neox_args.precision == "fp16" and model.optimizer.overflow:
                skipped_iter = 1
            else:
                skipped_iter = 0
            return loss, skipped_iter
        """,
        every_rule=True,
    ),
    case(
        "a metric reports its NaN as -1, every rule on",
        """\
        import torch
        def compute(self):
            precision = self.tp / (self.tp + self.fp + self.eps)
            recall = self.tp / (self.tp + self.fn + self.eps)
            f1_score = 2 * precision * recall / (precision + recall + self.eps)
            if torch.isnan(f1_score):
                f1_score = -1
            return f1_score
        """,
        every_rule=True,
    ),
    case(
        "masked scores' -inf replaced by the smallest finite value, every rule on",
        """\
        import torch
        def select(topk_scores, topk_indices, in_bounds):
            valid = in_bounds & torch.isfinite(topk_scores)
            topk_indices = torch.where(valid, topk_indices, torch.full_like(topk_indices, -1))
            return torch.where(
                valid, topk_scores, torch.full_like(topk_scores, torch.finfo(torch.float32).min)
            )
        """,
        every_rule=True,
    ),
    case(
        "a trainer holding a GradScaler clears NaN gradients in a check of its own",
        """\
        import torch
        class Brain:
            def __init__(self, modules):
                self.modules = modules
                self.scaler = torch.cuda.amp.GradScaler()
            def fit_batch(self, batch):
                loss = self.compute_loss(batch)
                self.scaler.scale(loss).backward()
                self.check_gradients()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            def check_gradients(self):
                for param in self.modules.parameters():
                    if param.grad is not None and not torch.isfinite(param.grad).all():
                        param.grad = None
        """,
        (15, "NZ201"),
    ),
    case(
        "the scaler is updated in the helper that hands back found_inf, every rule on",
        """\
        import torch
        class MixedPrecisionOptimizer:
            def _unscale_and_check(self):
                torch._amp_foreach_non_finite_check_and_unscale_(
                    self.main_grads, self.found_inf, self.grad_scaler.inv_scale
                )
                return self.found_inf.item() > 0
            def prepare_grads(self):
                found_inf_flag = self._unscale_and_check()
                self.grad_scaler.update(found_inf_flag)
                return found_inf_flag
            def step(self):
                found_inf_flag = self.prepare_grads()
                if found_inf_flag:
                    return False, None, None
                return self.step_with_ready_grads(), None, None
        """,
        (15, "NZ406"),
        every_rule=True,
    ),
    case(
        "top-k indices of masked-out scores set to -1, every rule on",
        """\
        import torch
        def select(index_scores, k):
            topk_scores, topk_indices = index_scores.topk(k, dim=-1)
            return topk_indices.masked_fill(topk_scores == float("-inf"), -1)
        """,
        every_rule=True,
    ),
    case(
        "an fp16 optimizer's OverflowError skips the step in the training loop",
        """\
        def train(model, loader, optimizer):
            for batch in loader:
                try:
                    model(batch).loss.backward()
                    optimizer.step()
                except OverflowError:
                    optimizer.zero_grad()
                    continue
        """,
        (7, "NZ201"),
    ),
    case(
        "a norm marked -1 for the overflow check, every rule on",
        """\
        def global_norm_of(tensors):
            total_norm = sum(t.norm() ** 2 for t in tensors) ** 0.5
            inf_or_nan = total_norm.isinf().logical_or(total_norm.isnan())
            total_norm.masked_fill_(inf_or_nan, -1)
            return total_norm
        """,
        (4, "NZ406"),
        every_rule=True,
    ),
    # ---- outside code, batch 7: what stands in is not finite, or no signal at all ----
    case(
        "a line search's Armijo error: NaN made inf rejects the trial",
        """\
        import jax.numpy as jnp
        def zoom(loss, new_loss, slope, stepsize, c1):
            decrease_error = new_loss - (loss + c1 * stepsize * slope)
            decrease_error = jnp.where(jnp.isnan(decrease_error), jnp.inf, decrease_error)
            return jnp.maximum(decrease_error, 0.0)
        """,
    ),
    case(
        "a non-finite log-probability masked with the class's -inf",
        """\
        import torch
        class MaskedCategorical(torch.distributions.Categorical):
            def log_prob(self, value):
                logits = self.logits.expand(value.shape + self.logits.shape)
                result = -torch.nn.functional.cross_entropy(logits, value, reduction="none")
                result = torch.where(torch.isfinite(result), result, self.neg_inf)
                return result
        """,
    ),
    case(
        "masked_fill and masked assignment with -inf hide nothing",
        """\
        import torch
        def step_scores(loss_terms):
            loss_terms = loss_terms.masked_fill(torch.isnan(loss_terms), float("-inf"))
            loss_terms[torch.isnan(loss_terms)] = -torch.inf
            return loss_terms
        """,
    ),
    case(
        "the same masked fill with 0 replaces the loss terms",
        """\
        import torch
        def step_scores(loss_terms):
            loss_terms = loss_terms.masked_fill(torch.isnan(loss_terms), 0.0)
            return loss_terms
        """,
        (3, "NZ104"),
    ),
    case(
        "a finite intercept clipped, an infinite one passed on as it is",
        """\
        import jax.numpy as jnp
        def leaf_intercepts(y, bound, gradient):
            intercepts = (y - bound) / gradient
            clipped = jnp.clip(intercepts, max=1.0)
            intercepts = jnp.where(jnp.isfinite(intercepts), clipped, intercepts)
            return intercepts
        """,
    ),
    case(
        "the old state kept on a non-finite update is still found",
        """\
        import jax.numpy as jnp
        def leaf_update(params, updates):
            new_params = params + updates
            return jnp.where(jnp.isfinite(new_params), new_params, params)
        """,
        (4, "NZ410"),
    ),
    case(
        "a graph called g: degree normalisation is no gradient",
        """\
        import torch
        class GCNLayer(torch.nn.Module):
            def forward(self, g, feature):
                norm = torch.pow(g.in_degrees().float(), -0.5)
                norm[torch.isinf(norm)] = 0
                return self.linear(feature * norm.unsqueeze(1))
        def train(model, g, features, labels, optimizer):
            for epoch in range(10):
                loss = torch.nn.functional.cross_entropy(model(g, features), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """,
    ),
    case(
        "a graph called g in the training function itself",
        """\
        import torch
        def train(model, g, features, labels, optimizer):
            norm = torch.pow(g.in_degrees().float(), -0.5)
            norm[torch.isinf(norm)] = 0
            g.ndata["norm"] = norm.unsqueeze(1)
            for epoch in range(200):
                loss = torch.nn.functional.cross_entropy(model(g, features), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        class Sampler:
            def get_norm(self, g):
                norm = 1.0 / g.in_degrees().float().unsqueeze(1)
                norm[torch.isinf(norm)] = 0
                return norm.to(self.g.ndata["feat"].device)
        """,
    ),
    case(
        "a module-level name does not make a function's parameter signal",
        """\
        import torch
        x = torch.autograd.grad(loss, params)[0]
        def scale(x):
            x = torch.where(torch.isinf(x), torch.zeros_like(x), x)
            return x
        """,
    ),
    case(
        "G in a tensor's shape is the number of groups",
        """\
        import torch
        def naive_attention(q, k, v, mask):
            B, T, HQ, D = q.shape
            G = HQ // k.shape[2]
            q = q.float().reshape(B, T, k.shape[2], G, D)
            s = torch.einsum("bqhgd,bkhd->bhgqk", q, k).masked_fill(mask, float("-inf"))
            m = s.amax(dim=-1, keepdim=True)
            m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            return torch.einsum("bhgqk,bkhd->bqhgd", (s - m).exp(), v)
        """,
    ),
    case(
        "g among gradients is a gradient",
        """\
        import jax
        import jax.numpy as jnp
        def train_step(params, batch):
            grads = jax.grad(loss_fn)(params, batch)
            return jax.tree.map(lambda g: jnp.where(jnp.isnan(g), 0.0, g), grads)
        """,
        (5, "NZ103"),
    ),
    case(
        "a random generator called g",
        """\
        import torch
        def sample(pipe, seed):
            g = torch.Generator().manual_seed(seed)
            return pipe(generator=g).images[0]
        def report(pipe, reference):
            ratio = compare(reference, sample(pipe, 0))
            shown = "inf" if ratio == float("inf") else f"{ratio:.1f}"
            return shown
        """,
    ),
    case(
        "a matcher's cost: a boolean setting named focal_loss is no loss",
        """\
        import jax.numpy as jnp
        def compute_cost(*, out_logits, tgt_labels, focal_loss: bool = False):
            cost = sigmoid_cost(out_logits, focal_loss=focal_loss)
            cost = jnp.einsum("bnl,bml->bnm", cost, tgt_labels)
            return jnp.nan_to_num(cost, nan=1e6, posinf=1e6, neginf=1e6)
        """,
    ),
    case(
        "a helper's padding value is not what it cleans",
        """\
        import numpy as np
        def time_delay_embedding(series, window, padding_value):
            shifts = [series.shift(i) for i in range(window)]
            return [np.nan_to_num(np.array(s), nan=padding_value) for s in shifts]
        def feature_data(column, preprocessing_parameters):
            padding_value = preprocessing_parameters["padding_value"]
            return time_delay_embedding(column, 3, padding_value)
        """,
    ),
    case(
        "an optimizer's no_grad update cleans its gradient: one finding, in the update",
        """\
        import torch
        class Lion(torch.optim.Optimizer):
            @torch.no_grad()
            def _update_param(self, p, group):
                grad = p.grad.float()
                grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                p.add_(grad.sign(), alpha=-group["lr"])
            def step(self, closure=None):
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            self._update_param(p, group)
        """,
        (6, "NZ101"),
    ),
    case(
        "a helper that cleans gradients of its own is one site, not one per call",
        """\
        import torch
        def clean_grads(grads):
            return [torch.nan_to_num(g) for g in grads]
        def train_step(model, optimizer, loss):
            loss.backward()
            grads = [p.grad for p in model.parameters()]
            clean_grads(grads)
            optimizer.step()
        """,
        (3, "NZ101"),
    ),
    case(
        "a dataset built from its parameters, predictions averaged for a report",
        """\
        import torch
        def predict_dependency(self, data, values):
            data = TimeSeriesDataSet.from_parameters(self.dataset_parameters, data)
            results = torch.stack([self.predict(data, value) for value in values])
            is_nan = torch.isnan(results)
            results[is_nan] = 0
            return results.sum(-1) / (~is_nan).float().sum(-1)
        """,
    ),
    case(
        "gathered metrics cleaned and turned into numbers for the log",
        """\
        import torch
        def log_ratios(self, mode, ratio_loss):
            gathered = self.accelerator.gather(ratio_loss)
            self._metrics[mode]["ratio/min"].append(gathered.nan_to_num(nan=float("inf")).min().item())
            self._metrics[mode]["ratio/max"].append(float(torch.nan_to_num(gathered).max()))
        """,
    ),
    case(
        "a summary for the message, then the raise",
        """\
        import torch
        for it, sample in enumerate(loader):
            losses = loss_module(sample)
            loss = losses["loss_actor"] + losses["loss_qvalue"]
            if not torch.isfinite(loss):
                loss_summary = {k: v.item() for k, v in losses.items()}
                raise RuntimeError(f"non-finite loss at {it}: {loss_summary}")
            loss.backward()
            optimizer.step()
        """,
    ),
    case(
        "a reported loss marked missing (None) while training goes on elsewhere",
        """\
        import math
        def on_step_end(self, event):
            loss = float(event["loss"])
            if not math.isfinite(loss):
                loss = None
            self.progress.loss = loss
            self.progress.step = event["step"]
        """,
    ),
    case(
        "loss_val is the loss's value, val_loss validation's",
        """\
        import torch
        def is_finite(tensor):
            return torch.isfinite(tensor).all()
        def train(loader, loss_fn, optimizer, evaluate):
            for batch in loader:
                loss_val = loss_fn(batch).mean()
                if not is_finite(loss_val):
                    continue
                loss_val.backward()
                optimizer.step()
                val_loss = evaluate()
                if not is_finite(val_loss):
                    continue
        """,
        (8, "NZ201"),
    ),
    case(
        "a NaN loss ends the epoch with a failure status for the caller to stop on",
        """\
        import math
        def train_one_epoch(model, loader, optimizer, step):
            for batch in loader:
                loss = model(batch)
                loss.backward()
                optimizer.step()
                step += 1
                if math.isnan(loss.item()):
                    return False, step
            return True, step
        """,
    ),
    case(
        "a helper that zeroes NaN by masked assignment wraps the training losses",
        """\
        import torch
        def deal_nan(x):
            x = x.clone()
            x[torch.isnan(x)] = 0.0
            return x
        def zero_bad_terms(terms):
            bad = torch.isnan(terms) | torch.isinf(terms)
            terms[bad] = 0.0
            return terms.mean()
        def loss(self, logits, labels):
            gold_loss = deal_nan(self.loss_func(logits, labels))
            return gold_loss + zero_bad_terms(self.per_sample_loss(logits, labels))
        """,
        (4, "NZ105"),  # the loss function hands its predictions in: reported in the helper
        (8, "NZ105"),
    ),
    case(
        "a Keras loss function cleans a value computed from its predictions",
        """\
        import tensorflow as tf
        def focal_tversky_loss(y_true, y_pred, gamma=0.75):
            index = tversky_index(y_true, y_pred)
            focal = tf.pow(1.0 - index, gamma)
            focal = tf.where(tf.math.is_finite(focal), focal, tf.ones_like(focal))
            return tf.reduce_mean(focal)
        """,
        (5, "NZ103"),
    ),
    case(
        "a term of the loss computed in a helper the loss function hands its predictions to",
        """\
        import tensorflow as tf
        def boundary_term(y_true, y_pred):
            per_sample = tf.reduce_mean(tf.abs(edges(y_true) - edges(y_pred)), axis=[1, 2])
            finite = tf.math.is_finite(per_sample)
            per_sample = tf.where(finite, per_sample, tf.zeros_like(per_sample))
            return tf.reduce_mean(per_sample)
        def segmentation_loss(y_true, y_pred):
            return dice(y_true, y_pred) + 0.25 * boundary_term(y_true, y_pred)
        """,
        (5, "NZ103"),
    ),
    case(
        "a helper the loss function hands only its labels to cleans labels",
        """\
        import tensorflow as tf
        def clean_targets(y_true):
            return tf.where(tf.math.is_finite(y_true), y_true, tf.zeros_like(y_true))
        def segmentation_loss(y_true, y_pred):
            return tf.reduce_mean(tf.square(clean_targets(y_true) - y_pred))
        """,
    ),
    case(
        "PPO: the actor's NaN outputs reset to defaults, a NaN ratio skips the minibatch",
        """\
        import torch
        def update(self, states, actions, old_log_probs, advantages):
            for _ in range(self.epochs):
                mu, sigma = self.actor(states)
                if torch.isnan(mu).any() or torch.isnan(sigma).any():
                    mu = torch.zeros_like(mu)
                    sigma = torch.ones_like(sigma) * 0.1
                dist = torch.distributions.Normal(mu, sigma)
                ratio = torch.exp(dist.log_prob(actions).sum(-1) - old_log_probs)
                if torch.isnan(ratio).any():
                    continue
                clipped = ratio.clamp(0.8, 1.2)
                actor_loss = -torch.min(ratio * advantages, clipped * advantages).mean()
                self.optimizer.zero_grad()
                actor_loss.backward()
                self.optimizer.step()
        """,
        (6, "NZ106"),
        (11, "NZ201"),
    ),
    case(
        "a loss function handing a NaN loss on for NaN predictions",
        """\
        import torch
        def yolo_loss(self, predictions, targets):
            if torch.isnan(predictions).any():
                print("NaN detected in predictions before the loss")
                return torch.tensor(float("nan"))
            return self.mse(predictions, targets)
        """,
    ),
    case(
        "a mask once set from a logged NaN test, then re-bound to select groups",
        """\
        import torch
        def compute_loss(self, logits, advantages):
            valid_mask = ~torch.isnan(logits.nanmean(dim=1))
            self.log("rows_with_nan", (~valid_mask).sum())
            scores = self.head(logits)
            valid_mask = (advantages > 0).any(dim=1) & (advantages <= 0).any(dim=1)
            loss = scores[valid_mask].mean()
            return loss
        """,
    ),
    case(
        "a found_inf flag packed into a tensor, all-reduced and read back skips the step",
        """\
        import torch
        def step(self):
            found_inf = self.prepare_grads()
            found_inf_tensor = torch.tensor([found_inf], dtype=torch.float32, device="cuda")
            torch.distributed.all_reduce(found_inf_tensor, op=torch.distributed.ReduceOp.MAX)
            found_inf = found_inf_tensor.item() > 0
            if found_inf:
                return False, None, None
            for optimizer in self.optimizers:
                optimizer.step()
            return True, self.get_grad_norm(), None
        def prepare_grads(self):
            grads = [p.grad for p in self.params]
            return not all(torch.isfinite(g).all() for g in grads)
        """,
        (8, "NZ201"),
    ),
    case(
        "flax: lax.cond picks a same-file function that hands the old state back",
        """\
        import jax
        import jax.numpy as jnp
        import optax
        def apply_step(params, opt_state, grads):
            is_finite = jnp.isfinite(optax.global_norm(grads))
            def _do_update(_):
                updates, new_opt_state = tx.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), new_opt_state
            def _skip(_):
                return params, opt_state
            new_params, new_opt_state = jax.lax.cond(is_finite, _do_update, _skip, None)
            return new_params, new_opt_state
        """,
        (11, "NZ410"),
    ),
    case(
        "TF: a gradient helper fills NaN with a value the caller passes",
        """\
        import tensorflow as tf
        def replace_nan(grad, val):
            return tf.where(tf.math.is_nan(grad), val * tf.ones_like(grad), grad)
        """,
        (3, "NZ103"),
    ),
    case(
        "an epoch loop that ends training on a NaN average loss",
        """\
        import numpy as np
        def train(self):
            for epoch in range(self.num_epochs):
                total = 0.0
                for batch in self.loader:
                    loss = self.criterion(self.model(batch.x), batch.y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                    total += loss.item()
                avg_loss = total / len(self.loader)
                if np.isnan(avg_loss):
                    print("Training stopped due to NaN loss")
                    break
            return self.model
        """,
    ),
    case(
        "a callback prints each non-finite gradient, then raises",
        """\
        import torch
        class DebugCallback(Callback):
            def on_before_optimizer_step(self, trainer, pl_module, optimizer):
                if not all(torch.isfinite(t.grad).all() for t in pl_module.parameters()):
                    for t in pl_module.parameters():
                        if not torch.isfinite(t.grad).all():
                            print(t.name, t.grad)
                    raise ValueError("gradient is not finite")
        """,
    ),
    case(
        "a warning, then the gradient cleaned in the check's branch: one finding",
        _warn_then_clean(
            """\
            param.grad = torch.where(
                torch.isnan(param.grad), torch.zeros_like(param.grad), param.grad
            )
            """
        ),
        (9, "NZ103"),
    ),
    case(
        "a warning, then the gradient cleaned with a named zero fill: one finding",
        _warn_then_clean(
            """\
            zeros = torch.zeros_like(param.grad)
            param.grad = torch.where(torch.isnan(param.grad), zeros, param.grad)
            """
        ),
        (10, "NZ106"),
    ),
    case(
        "an RNN-T loss builds its start state from a constant times a mask of the logit lengths",
        """\
        import tensorflow as tf
        LOG_0 = float("-inf")
        def nan_to_zero(x):
            return tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)
        def rnnt_loss(logits, labels, logit_length, input_max_len):
            mask = tf.one_hot(logit_length - 1, depth=input_max_len + 1)
            initial = nan_to_zero(LOG_0 * (1.0 - mask))
            return -tf.reduce_mean(initial + tf.reduce_sum(logits * labels))
        """,
    ),
    case(
        "GAN: a penalty term joins the generator loss only when it is not NaN",
        """\
        import torch
        def train_generator(self, w_styles, generated_images, gen_loss):
            pl_lengths = calc_pl_lengths(w_styles, generated_images)
            pl_loss = ((pl_lengths - self.pl_mean) ** 2).mean()
            if not torch.isnan(pl_loss):
                gen_loss = gen_loss + pl_loss
            gen_loss.backward()
            self.g_optimizer.step()
        """,
        (5, "NZ107"),
    ),
    case(
        "a penalty function cleans the value it returns",
        """\
        import jax.numpy as jnp
        def divergence_penalty(velocity, positions):
            div = jnp.sum(velocity * positions, axis=-1) / jnp.sum(positions**2, axis=-1)
            result = jnp.mean(div**2)
            return jnp.where(jnp.isfinite(result), result, jnp.zeros_like(result))
        """,
        (5, "NZ103"),
    ),
    case(
        "a loss function cleans the metrics it returns beside the loss",
        """\
        import jax.numpy as jnp
        def loss_fn(params, batch):
            logits = model.apply(params, batch["x"])
            loss = cross_entropy(logits, batch["y"])
            accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
            return loss, jnp.where(jnp.isfinite(accuracy), accuracy, 0.0)
        """,
    ),
    case(
        "a NaN prior loss set to None, and the loss built without it",
        """\
        import torch
        def train_step(self, pred, prior_pred, loss):
            prior_loss = torch.nn.functional.mse_loss(pred, prior_pred)
            if not torch.isfinite(prior_loss).all():
                print("Prior loss is nan")
                prior_loss = None
            if prior_loss is not None:
                loss = loss + prior_loss
            loss.backward()
            self.optimizer.step()
        """,
        (6, "NZ106"),
    ),
    case(
        "a 0/1 overflow flag all-reduced and compared with 1 skips the step",
        """\
        import torch
        def step(self, loss):
            loss.backward()
            overflow = torch.tensor([0.0], device="cuda")
            for p in self.model.parameters():
                if not torch.isfinite(p.grad).all():
                    overflow = torch.tensor([1.0], device="cuda")
            torch.distributed.all_reduce(overflow)
            if overflow.item() >= 1:
                self.logger.warning("skipping a step with non-finite gradients")
            else:
                self.optimizer.step()
        """,
        (9, "NZ201"),
    ),
    case(
        "a validation pass inside the training function leaves NaN batches out of its mean",
        """\
        import torch
        def main(model, optimizer, train_loader, val_loader):
            for epoch in range(10):
                for batch in train_loader:
                    loss = model(**batch).loss
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                val_sum, n_val = 0.0, 0
                with torch.no_grad():
                    for batch in val_loader:
                        outputs = model(**batch)
                        if torch.isnan(outputs.loss):
                            continue
                        val_sum += outputs.loss.item()
                        n_val += 1
                print(epoch, val_sum / max(n_val, 1))
        """,
    ),
    case(
        "a helper from another module named for the test decides the skip",
        """\
        from utils.checks import has_nan_or_inf
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch).loss
                optimizer.zero_grad()
                loss.backward()
                if has_nan_or_inf([p.grad for p in model.parameters()]):
                    continue
                optimizer.step()
        """,
        (8, "NZ201"),
    ),
    case(
        "a flag named for the test, bound from another module's helper and turned 0/1",
        """\
        import torch
        from utils import is_gradient_nan
        def update(self):
            self.loss.backward()
            is_grad_nan = is_gradient_nan(self.value_model)
            is_grad_nan = torch.where(is_grad_nan, 1.0, 0.0)
            torch.distributed.all_reduce(is_grad_nan)
            if is_grad_nan.item() >= 1:
                self.optimizer.zero_grad()
                return
            self.optimizer.step()
        """,
        (9, "NZ201"),
    ),
    case(
        "names that only look like finiteness tests",
        """\
        import torch
        from utils import is_inference_mode, nan_error_check
        def train(model, loader, optimizer):
            for batch in loader:
                if is_inference_mode():
                    continue
                loss = model(batch).loss
                nan_error_check(loss)
                loss.backward()
                optimizer.step()
        """,
    ),
    case(
        "a step-size controller resets an infinite inverse error after stop_gradient",
        """\
        import jax.numpy as jnp
        from jax import lax
        def adapt_step_size(self, prev_dt, scaled_error):
            inv_scaled_error = lax.stop_gradient(1 / jnp.asarray(scaled_error))
            factor = jnp.clip(self.safety * inv_scaled_error, 0.2, 10.0)
            pred = (inv_scaled_error == 0) | jnp.isinf(inv_scaled_error)
            inv_scaled_error = jnp.where(pred, 1, inv_scaled_error)
            return prev_dt * factor, inv_scaled_error
        """,
    ),
    case(
        "a score made from the predictions, cleaned, then detached and binned as the target",
        """\
        import torch
        def lddt_loss(logits, all_atom_pred_pos, all_atom_positions, no_bins=50):
            score = lddt(all_atom_pred_pos, all_atom_positions)
            score = torch.nan_to_num(score, nan=torch.nanmean(score))
            score = score.detach()
            bin_index = torch.floor(score * no_bins).long()
            target = torch.nn.functional.one_hot(bin_index, num_classes=no_bins)
            errors = softmax_cross_entropy(logits, target)
            return torch.mean(errors)
        """,
    ),
    case(
        "a masked mean's 0/0 set to 0 only when the input held no NaN",
        """\
        import jax.numpy as jnp
        def safe_reduce(a, where=None):
            output = jnp.mean(a, where=where)
            is_input_valid = jnp.logical_not(jnp.any(jnp.isnan(a)))
            return jnp.where(jnp.isnan(output) & is_input_valid, 0.0, output)
        def listwise_loss(logits, labels, where):
            loss = -jnp.sum(labels * logits, axis=-1, where=where)
            return safe_reduce(loss, where=jnp.any(where, axis=-1))
        """,
    ),
    case(
        "a mask over parameters is no parameter: a sampler picks by it",
        """\
        import tensorflow as tf
        def sample(log_rates, seed):
            good_params_mask = ~tf.math.is_nan(log_rates)
            high_params_mask = good_params_mask & (log_rates >= 2.3)
            high = sample_high(tf.where(high_params_mask, log_rates, 100.0), seed)
            low = sample_low(tf.where(high_params_mask, 1e-5, tf.exp(log_rates)), seed)
            return tf.where(good_params_mask, tf.where(high_params_mask, high, low), float("nan"))
        """,
    ),
    case(
        "a diverging MCMC proposal is accepted with probability 0",
        """\
        import jax.numpy as jnp
        def adapt_step_size(state, loss_fn):
            log_accept_ratio = -state.energy_change + jnp.sum(state.grads)
            accept_prob = jnp.exp(jnp.minimum(0.0, log_accept_ratio))
            accept_prob = jnp.where(jnp.isfinite(accept_prob), accept_prob, 0.0)
            loss = loss_fn(state.step_size, accept_prob)
            return loss
        """,
    ),
    case(
        "-inf converted to the dtype is still not finite",
        """\
        import numpy as np
        import tensorflow as tf
        def log_prob(self, x, loss_scale):
            y = self._log_unnormalized(x) - loss_scale
            return tf.where((y < 0.0) & tf.math.is_inf(y), np.float32(-np.inf), y)
        """,
    ),
    case(
        "a loss function cleans the gradient it builds its target from",
        """\
        import torch
        import torch.nn.functional as F
        def sds_loss(self, text_embeddings, image, t):
            with torch.no_grad():
                noise = torch.randn_like(image)
                noise_pred = self.unet(self.scheduler.add_noise(image, noise, t), t)
            grad = (1 - self.alphas[t]) * (noise_pred - noise)
            grad = torch.nan_to_num(grad)
            target = (image - grad).detach()
            return 0.5 * F.mse_loss(image, target, reduction="sum")
        """,
        (8, "NZ101"),
    ),
    case(
        "error_if_nonfinite=False in an fp16 loss-scaling optimizer's config is loss scaling",
        """\
        optim_wrapper = dict(
            type=AmpOptimWrapper,
            optimizer=dict(type=AdamW, lr=2e-4),
            clip_grad=dict(max_norm=1, error_if_nonfinite=False),
            loss_scale="dynamic",
            dtype="float16",
        )
        plain = dict(type=OptimWrapper, clip_grad=dict(max_norm=1, error_if_nonfinite=False))
        """,
        (8, "NZ404"),
    ),
    case(
        "a mode search that keeps its last point: one finding for one site",
        """\
        import torch
        def mode(self):
            m = self.loc.clone().requires_grad_()
            optim = torch.optim.SGD([m], lr=1e-3)
            for _ in range(200):
                (-self.log_prob(m)).mean().backward()
                previous = m.clone().detach()
                optim.step()
                optim.zero_grad()
                nans = m.isnan()
                if nans.any():
                    m.data = torch.where(nans, previous, m.data)
            return m.detach()
        """,
        (12, "NZ410"),
    ),
    # ---- NaN-ignoring reductions of the losses -----------------------------------------
    case(
        "per-sample losses reduced with nanmean in a training step",
        """\
        def training_step(self, batch):
            losses = self.criterion(self.model(batch["x"]), batch["y"])
            loss = losses.nanmean()
            loss.backward()
            self.optimizer.step()
        """,
        (3, "NZ107"),
    ),
    case(
        "a JAX loss function hands back the nanmean of its per-sample losses",
        """\
        import jax.numpy as jnp
        def loss_fn(params, batch, model):
            pred = model.apply(params, batch["x"])
            loss = jnp.square(pred - batch["y"])
            mean_loss = jnp.nanmean(loss)
            return mean_loss, pred
        """,
        (5, "NZ107"),
    ),
    case(
        "a NaN-ignoring mean of an error measure, or of NumPy errors, is no loss",
        """\
        import jax.numpy as jnp
        import numpy as np
        def train_step(state, batch):
            loss, grads = grad_fn(state.params, batch)
            pred = state.apply_fn(state.params, batch["x"])
            errp = jnp.nanmean(pred / batch["y"] * 100.0)
            return state.apply_gradients(grads=grads), errp
        def mse_loss(y, y_hat):
            return np.nanmean(np.square(y - y_hat))
        """,
    ),
    # ---- an optional scaler: the check is the code's own -------------------------------
    case(
        "a grad-norm skip where the scaler is optional (used only behind `scaler is not None`)",
        """\
        import torch
        from typing import Optional
        from torch.cuda.amp import GradScaler
        def train_one_epoch(model, iterator, optimizer, scaler: Optional[GradScaler]):
            for batch in iterator:
                loss = model(**batch)
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if not torch.isfinite(grad_norm):
                    logging.warning("grad norm is %s, skipping the update", grad_norm)
                    if scaler is not None:
                        for opt in [optimizer]:
                            if opt is None:
                                continue
                            scaler.step(opt)
                            scaler.update()
                else:
                    stats = {"loss_scale": scaler.get_scale() if scaler else 1.0}
                    if scaler is not None:
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        optimizer.step()
                optimizer.zero_grad()
        """,
        (12, "NZ201"),
    ),
    case(
        "a skip behind `use_fp16 and scaler is not None`: the plain path skips too",
        """\
        import torch
        def train_epoch(self, model, loader, optim, scaler):
            for batch in loader:
                loss = model(batch)
                if self.use_fp16 and scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if not torch.isfinite(grad_norm):
                    optim.zero_grad()
                    continue
                if self.use_fp16 and scaler is not None:
                    scaler.step(optim)
                    scaler.update()
                else:
                    optim.step()
        """,
        (11, "NZ201"),
    ),
    case(
        "a NaN loss skipped where a grad scaler always works is the code's own skip",
        """\
        import torch
        def train(self, loader):
            for batch in loader:
                out = self.model(batch)
                record_loss = out["loss"].detach()
                is_nan = torch.tensor(int(torch.isnan(record_loss).any()))
                dist.all_reduce(is_nan)
                if is_nan.item() > 0:
                    continue
                self.scaler.scale(out["loss"]).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
        """,
        (9, "NZ201"),
    ),
    *opt_in_or_not(
        "an fp16 optimizer's OverflowError where the scaler shows only on the fp16 side",
        """\
        def train_step(self, samples):
            overflow = False
            try:
                self.task.train_step(samples, self.model, self.optimizer)
                self.optimizer.step()
            except OverflowError:
                overflow = True
                self.zero_grad()
            if self.cfg.fp16 and not self.cfg.bf16:
                log_scalar("loss_scale", self.optimizer.scaler.loss_scale)
        """,
        every_rule=[(8, "NZ406")],
    ),
    # ---- loss classes ------------------------------------------------------------------
    case(
        "a loss module cleans its input, the model's output (torch's forward(input, target))",
        """\
        import torch
        from torch import nn
        class DDPLoss(nn.Module):
            def forward(self, input, target, natoms):
                if not torch.all(input.isfinite()):
                    input = torch.nan_to_num(input, nan=0.0)
                return self.loss_fn(input, target, natoms)
        """,
        (6, "NZ101"),
    ),
    case(
        "a loss module weighting classes from its target: infinite weights are label work",
        """\
        import torch
        from torch import nn
        class GeneralizedDiceLoss(nn.Module):
            def forward(self, input, target):
                n_pred_ch = input.shape[1]
                target = one_hot(target, num_classes=n_pred_ch)
                ground_o = torch.sum(target, [2, 3])
                w = self.w_func(ground_o.float())
                infs = torch.isinf(w)
                w[infs] = 0.0
                tp = (input * target).sum([2, 3])
                return 1.0 - (2.0 * (tp * w).sum(1)) / (w.sum(1) + 1e-5)
        """,
    ),
    case(
        "a loss module leaves out structures whose label is NaN (pairs from zip)",
        """\
        import torch
        from torch import nn
        class CombinedLoss(nn.Module):
            def forward(self, targets, prediction):
                preds, labels = [], []
                for pred, label in zip(prediction["m"], targets["m"], strict=True):
                    if label is not None and not torch.isnan(label).any():
                        preds.append(pred)
                        labels.append(label)
                return self.criterion(torch.cat(preds), torch.cat(labels))
        """,
    ),
    case(
        "a distillation loss masks the positions where the logits were masked to -inf",
        """\
        import torch
        import torch.nn.functional as F
        class ForwardKLLoss(torch.nn.Module):
            def forward(self, student_logits, teacher_logits, labels):
                teacher_prob = F.softmax(teacher_logits, dim=-1)
                inf_mask = torch.isinf(student_logits)
                student_logprob = F.log_softmax(student_logits, dim=-1)
                prod_probs = torch.masked_fill(teacher_prob * student_logprob, inf_mask, 0)
                return -torch.sum(prod_probs, dim=-1).mean()
        """,
    ),
    *opt_in_or_not(
        "a loss class calling its own forward makes no other forward a loss part",
        """\
        import torch
        from torch import nn
        class EncoderLayer(nn.Module):
            def forward(self, hidden_states, attention_mask):
                hidden_states = self.norm(hidden_states + self.attn(hidden_states, attention_mask))
                if self.training:
                    if not torch.isfinite(hidden_states).all():
                        clamp_value = torch.finfo(hidden_states.dtype).max - 1000
                        hidden_states = torch.clamp(hidden_states, -clamp_value, clamp_value)
                return hidden_states
        class SegmentationLoss(nn.Module):
            def forward(self, mask_logits, class_logits, mask_labels, auxiliary=None):
                losses = self.dice(mask_logits, class_logits, mask_labels)
                for aux in auxiliary or []:
                    losses += self.forward(aux["mask_logits"], class_logits, mask_labels)
                return losses
        """,
        every_rule=[(9, "NZ408")],
    ),
    case(
        "a criterion passes on a zero_infinity setting whose default the file declares off",
        """\
        import torch.nn.functional as F
        from dataclasses import dataclass, field
        @dataclass
        class CtcCriterionConfig:
            zero_infinity: bool = field(default=False)
        class CtcCriterion:
            def __init__(self, cfg):
                self.zero_infinity = cfg.zero_infinity
            def forward(self, model, sample):
                lprobs = model(**sample["net_input"])
                return F.ctc_loss(lprobs, sample["target"], sample["lengths"],
                                  sample["target_lengths"], zero_infinity=self.zero_infinity)
        """,
        every_rule=True,
    ),
    # ---- helpers from other modules named for cleaning non-finite values --------------
    case(
        "an imported helper named for replacing NaN, given the gradients",
        """\
        import tensorflow as tf
        from .utils import replace_nan
        def minimize_step(model, loss_fn, optimizer, batch):
            with tf.GradientTape() as tape:
                loss = loss_fn(model(batch))
            gradients = tape.gradient(loss, model.trainable_variables)
            gradients = [replace_nan(grad, 0) for grad in gradients]
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        """,
        (7, "NZ101"),
    ),
    case(
        "an imported NaN-to-zero helper under another name",
        """\
        from helpers import nan_to_zero as scrub
        def train_step(model, batch, optimizer):
            loss = model(batch).loss
            loss.backward()
            for p in model.parameters():
                p.grad = scrub(p.grad)
            optimizer.step()
        """,
        (6, "NZ101"),
    ),
    case(
        "a gradient hook named for turning NaN into zeros, defined elsewhere",
        """\
        from .hooks import nan_to_zero_hook
        def train(checkpoint, loss_func):
            for p in checkpoint.model.parameters():
                p.register_hook(nan_to_zero_hook)
            for batch in checkpoint.batch_iterator:
                loss_func(checkpoint.model, batch).backward()
                checkpoint.optimizer.step()
        """,
        (4, "NZ102"),
    ),
    case(
        "helpers that divide safely, make Inf NaN, or clean the input data",
        """\
        from .utils import divide_no_nan, inf_to_nan, remove_nans
        def train_step(model, batch, optimizer):
            features = remove_nans(batch["features"])
            loss = divide_no_nan(model(features).sum(), batch["count"])
            loss = inf_to_nan(loss)
            loss.backward()
            optimizer.step()
        """,
    ),
    case(
        "a NaN gradient penalty left out of the loss beside a grad scaler: no scaler drops terms",
        """\
        import torch
        def train_discriminator(self, batch):
            disc_loss = self.d_loss(batch)
            gp = self.gradient_penalty(batch)
            if not torch.isnan(gp):
                disc_loss = disc_loss + gp
            self.scaler.scale(disc_loss).backward()
            self.scaler.step(self.d_opt)
            self.scaler.update()
        """,
        (5, "NZ107"),
    ),
    case(
        "fp16 attention weights cleaned beside a key-value cache's update: a cache is no optimizer",
        """\
        import torch
        class Attention(torch.nn.Module):
            def forward(self, hidden_states, past_key_value=None):
                query = self.q_proj(hidden_states)
                key = self.k_proj(hidden_states)
                value = self.v_proj(hidden_states)
                if past_key_value is not None:
                    key, value = past_key_value.update(key, value, self.layer_idx)
                attn_weights = torch.matmul(query, key.transpose(2, 3))
                if query.dtype == torch.float16:
                    zeros = torch.zeros_like(attn_weights)
                    attn_weights = torch.where(torch.isinf(attn_weights), zeros, attn_weights)
                return torch.matmul(attn_weights.softmax(-1), value)
        """,
    ),
    case(
        "optax's update still hands back updates: cleaning them is NZ103",
        """\
        import jax.numpy as jnp
        def step(params, opt_state, batch):
            grads = grad_fn(params, batch)
            updates, opt_state = tx.update(grads, opt_state, params)
            updates = jnp.where(jnp.isfinite(updates), updates, 0.0)
            return apply(params, updates), opt_state
        """,
        (5, "NZ103"),
    ),
    case(
        "a reward model's loss computed after decoding under no_grad, clamped when infinite",
        """\
        import torch
        class RewardModel:
            def reward_scorer(self, latents, loss_recon):
                with torch.no_grad():
                    frames = self.autoencoder.decode(latents)
                rewards = self.scorer(frames)
                reward_loss = (rewards * loss_recon).mean()
                if torch.isinf(reward_loss):
                    reward_loss = reward_loss.clamp(-1.0, 1.0)
                loss = self.weight * reward_loss
                return loss
        """,
        (9, "NZ106"),
    ),
    case(
        "a loss returned from a function decorated with no_grad: an evaluation",
        """\
        import math
        import torch
        @torch.no_grad()
        def valid(self):
            total = 0.0
            for batch in self.valid_loader:
                loss = self.model(batch)
                if math.isfinite(float(loss)):
                    total += float(loss)
                else:
                    print("non-finite validation loss")
            return total
        """,
    ),
    case(
        "a reward margin for the logs made a number after arithmetic on cleaned means",
        """\
        import torch
        def get_batch_metrics(self, batch):
            with torch.no_grad():
                reference = self.forward(self.reference_model, batch)
            losses, chosen, rejected = self.loss(batch, reference)
            metrics = {}
            margin = (chosen.mean().nan_to_num(0) - rejected.mean().nan_to_num(0)).item()
            metrics["margins"] = torch.tensor([margin])
            return losses.mean(), metrics
        """,
    ),
    case(
        "a NaN generator loss drops into the debugger: training stops for investigation",
        """\
        import torch
        def train_epoch(model, loader, optimizer):
            for batch in loader:
                g_loss = model(batch)
                g_loss.backward()
                if torch.isnan(g_loss):
                    from IPython.core.debugger import set_trace
                    set_trace()
                optimizer.step()
        """,
    ),
    case(
        "a NaN loss calls breakpoint() before the step",
        """\
        import math
        def fit(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                if not math.isfinite(loss.item()):
                    breakpoint()
                loss.backward()
                optimizer.step()
        """,
    ),
    case(
        "timm's loss scaler called only when the loss is not NaN: the step is skipped",
        """\
        import torch
        def train_one_epoch(model, loader, optimizer, loss_scaler):
            for samples, targets in loader:
                with torch.cuda.amp.autocast():
                    loss = model(samples, targets)
                nan_loss = torch.isnan(loss)
                if not nan_loss:
                    loss_scaler(loss, optimizer, parameters=model.parameters())
                optimizer.zero_grad()
        """,
        (7, "NZ201"),
    ),
    case(
        "timm's loss scaler after a check that exits (MAE, DeiT): correct",
        """\
        import math
        import sys
        def train_one_epoch(model, loader, optimizer, loss_scaler):
            for samples, targets in loader:
                loss = model(samples, targets)
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    print("Loss is {}, stopping training".format(loss_value))
                    sys.exit(1)
                loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
        """,
    ),
    case(
        "a rejected step's flag stored only in the stats for the logs: nothing raises on it",
        """\
        import jax.numpy as jnp
        from jax import lax
        def step(self, params, velocities, loss, delta, batch):
            new_params = params + delta
            new_loss = self.loss_value(new_params, batch)
            reject_step = jnp.logical_or(jnp.isnan(new_loss), new_loss > loss)
            params, velocities = lax.cond(
                reject_step, lambda: (params, velocities), lambda: (new_params, delta)
            )
            stats = dict(loss=loss, new_loss=new_loss)
            stats["step_rejected"] = reject_step
            return params, velocities, stats
        """,
        (7, "NZ410"),
    ),
    case(
        "a rejected step's flag handed back beside the state: the caller may raise on it",
        """\
        import jax.numpy as jnp
        from jax import lax
        def step(self, params, velocities, loss, delta, batch):
            new_params = params + delta
            new_loss = self.loss_value(new_params, batch)
            reject_step = jnp.isnan(new_loss)
            params, velocities = lax.cond(
                reject_step, lambda: (params, velocities), lambda: (new_params, delta)
            )
            return params, velocities, reject_step
        """,
    ),
    case(
        "gradients cleaned through a helper that calls a jitted tree map of nan_to_num",
        """\
        import functools
        import jax
        import jax.numpy as jnp
        import numpy as onp
        @functools.partial(jax.jit, donate_argnums=(0,))
        def _jit_nan_to_num(vals, replace):
            clean = functools.partial(jnp.nan_to_num, nan=replace, posinf=replace)
            return jax.tree_util.tree_map(clean, vals)
        def _nan_to_num(vals, replace, use_jnp=False):
            if use_jnp:
                return _jit_nan_to_num(vals, replace)
            return jax.tree_util.tree_map(onp.nan_to_num, vals)
        def outer_step(grads_accum, outer_opt, state):
            grads_accum = _nan_to_num(grads_accum, 0.0, use_jnp=True)
            return outer_opt.update(grads_accum, state)
        """,
        (14, "NZ101"),
    ),
    case(
        "the same tree-map helper over the logged metrics only",
        """\
        import jax
        import numpy as onp
        def _nan_to_num(vals):
            return jax.tree_util.tree_map(onp.nan_to_num, vals)
        def summarize(metrics_list):
            metrics = _nan_to_num(metrics_list)
            return {k: float(v) for k, v in metrics.items()}
        """,
    ),
    case(
        "a client's gradient through an imported helper that starts by zeroing (TFF)",
        """\
        import tensorflow as tf
        from tensorflow_federated.python.tensorflow_libs import tensor_utils
        def client_update(model, dataset):
            gradient_sums, num_examples = accumulate(model, dataset)
            average_gradient = tf.nest.map_structure(lambda g: g / num_examples, gradient_sums)
            average_gradient, has_non_finite = tensor_utils.zero_all_if_any_non_finite(
                average_gradient
            )
            return average_gradient, has_non_finite
        """,
        (6, "NZ101"),
    ),
    case(
        "an imported test named with any and if is no cleaner",
        """\
        from helpers import any_non_finite_if_present
        def client_update(model, dataset, average_gradient):
            if any_non_finite_if_present(average_gradient):
                raise FloatingPointError("non-finite client gradient")
            return average_gradient
        """,
    ),
    case(
        "a reject flag made with tf.equal from a same-file check, the old weights kept",
        """\
        import tensorflow as tf
        from tensorflow_federated.python.tensorflow_libs import tensor_utils
        def should_reject(update):
            has_non_finite = tensor_utils.has_non_finite(update)
            return tf.equal(has_non_finite, 1)
        def next_fn(optimizer, optimizer_state, weights, update):
            new_state, new_weights = optimizer.next(optimizer_state, weights, update)
            if should_reject(update):
                return optimizer_state, weights
            return new_state, new_weights
        """,
        (9, "NZ201"),
    ),
    case(
        "a skip flag set from a NaN-loss flag beside a grad scaler: the code's own skip",
        """\
        import torch
        def train(self, loader):
            skip_flag = False
            for batch in loader:
                out = self.model(batch)
                record_loss = out["loss"].detach()
                is_nan = torch.tensor(int(torch.isnan(record_loss).any()))
                if is_nan.item() > 0:
                    skip_flag = True
                self.scaler.scale(out["loss"]).backward()
                if skip_flag:
                    self.optimizer.zero_grad()
                    skip_flag = False
                    continue
                self.scaler.step(self.optimizer)
                self.scaler.update()
        """,
        (12, "NZ201"),
    ),
    case(
        "a resolution's STFT loss joined to the total only when finite, else logged",
        """\
        import logging
        import torch
        def forward(self, x, y):
            sc_loss = torch.zeros(0)
            for stft_loss in self.stft_losses:
                sc = stft_loss(x, y)
                if not torch.isinf(sc.sum()) and not torch.isnan(sc.sum()):
                    sc_loss = torch.cat((sc_loss, sc.unsqueeze(-1)), -1)
                else:
                    logging.info("non-finite resolution")
            return sc_loss.mean()
        """,
        (7, "NZ107"),
    ),
    case(
        "a NaN cross-entropy term left out of the policy's total loss, the else a no-op",
        """\
        import torch
        def forward(self, batch):
            loss = self.action_loss(batch)
            cross_entropy_loss = self.loss_fct(batch["logits"], batch["labels"])
            if not torch.isnan(cross_entropy_loss):
                loss = loss + cross_entropy_loss
            else:
                with torch.no_grad():
                    cross_entropy_loss.detach()
            return loss
        """,
        (5, "NZ107"),
    ),
    case(
        "a finite grad norm kept in a history for a plot, the else drops the value",
        """\
        import math
        def on_event(self, event, step):
            gn = float(event["grad_norm"])
            if math.isfinite(gn):
                self.grad_norm_history.append(gn)
            else:
                gn = None
            return gn
        """,
    ),
    case(
        "a loss built on BaseLoss masks NaN predictions in a helper; the target fill is labels",
        """\
        import torch
        class CRPS(BaseLoss):
            def mask_nans(self, pred, target):
                nan_mask = torch.isnan(target).any(0) | torch.isnan(pred).any(0)
                target = target.masked_fill(nan_mask, 0.0)
                pred = pred.masked_fill(nan_mask, 0.0)
                return pred, target
            def forward(self, y_pred, y_target):
                y_pred, y_target = self.mask_nans(y_pred, y_target)
                return self.kernel_crps(y_pred, y_target).mean()
        """,
        (6, "NZ104"),
    ),
    case(
        "features built with a module's constant table of settings named params",
        """\
        import torch
        PARAMS = {"DMIN": 2.0, "DMAX": 20.0, "DBINS": 36}
        def xyz_to_t2d(xyz_t, params=PARAMS):
            c6d = xyz_to_c6d(xyz_t, params=params)
            t2d = torch.cat((c6d, torch.isnan(c6d[..., :1]).float()), dim=-1)
            t2d[torch.isnan(t2d)] = 0.0
            return t2d
        """,
    ),
    case(
        "a model's singular solve falling back to the identity: a numeric fallback, whose"
        " NaN inputs still reach the loss",
        """\
        import torch
        from torch import nn
        class KPLayer(nn.Module):
            def one_step_forward(self, z):
                x, y = z[:, :-1], z[:, 1:]
                self.K = torch.linalg.lstsq(x, y).solution
                if torch.isnan(self.K).any():
                    print("Encounter K with nan, replace K by identity matrix")
                    self.K = torch.eye(self.K.shape[1]).unsqueeze(0).repeat(z.shape[0], 1, 1)
                return torch.bmm(z[:, -1:], self.K)
        """,
    ),
    case(
        "an EGNN's velocity output reset to zeros when any element is NaN",
        """\
        import torch
        import equinox as eqx
        class Dynamics(eqx.Module):
            def _forward(self, t, xh, node_mask):
                h_final, x_final = self.egnn(xh, node_mask)
                vel = (x_final - xh) * node_mask
                if torch.any(torch.isnan(vel)):
                    print("Warning: detected nan, resetting EGNN output to zero.")
                    vel = torch.zeros_like(vel)
                return vel
        """,
        (9, "NZ106"),
    ),
    case(
        "a model's input reset when it holds NaN: input cleaning",
        """\
        import torch
        from torch import nn
        class Encoder(nn.Module):
            def forward(self, x):
                if torch.isnan(x).any():
                    x = torch.zeros_like(x)
                return self.net(x)
        """,
    ),
    case(
        "a plain helper class resetting a NaN statistic: no model's output",
        """\
        import torch
        class RunningStats:
            def update(self, values):
                mean = values.mean(0)
                if torch.isnan(mean).any():
                    mean = torch.zeros_like(mean)
                self.mean = 0.9 * self.mean + 0.1 * mean
        """,
    ),
    case(
        "a Metropolis step accepts only finite proposals: a sampler's acceptance test",
        """\
        import numpy as np
        def mcmc(x, log_prob, n_steps, rng):
            log_p = log_prob(x)
            for _ in range(n_steps):
                proposal = x + rng.normal(size=x.shape)
                log_p_new = log_prob(proposal)
                log_u = np.log(rng.random(len(x)))
                accept = (log_p_new - log_p > log_u) & np.isfinite(log_p_new)
                x[accept] = proposal[accept]
                log_p[accept] = log_p_new[accept]
            return x
        """,
    ),
    case(
        "per-sample losses kept where finite and below a bound: no random draw, a drop",
        """\
        import torch
        def train(model, loader, optimizer):
            for batch in loader:
                losses = model(batch)
                keep = torch.isfinite(losses) & (losses < 1e4)
                loss = losses[keep].mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """,
        (6, "NZ107"),
    ),
    case(
        "a Lightning step returns early on a NaN loss what it always returns: no skip",
        _lightning_step_leaving_with('return {"loss": loss}'),
    ),
    case(
        "a Lightning step returning None on a NaN loss still skips the step",
        _lightning_step_leaving_with("return None"),
        (8, "NZ201"),
    ),
    case(
        "parameters holding NaN put back to a saved copy, and training goes on",
        """\
        import torch
        def recover(model, saved):
            bad = sum(torch.isnan(p).sum() for p in model.parameters())
            if bad > 0:
                for p, last in zip(model.parameters(), saved):
                    p.data = last.data.clone()
                print("recovered from NaN parameters")
        """,
        (6, "NZ410"),
    ),
    case(
        "a model rolled back to its last good state on a NaN loss, and training goes on",
        _rolled_back("continue"),
        (6, "NZ410"),
    ),
    case(
        "a saved copy loaded after a NaN is raised about: the copy is for the post-mortem",
        _rolled_back('raise FloatingPointError("non-finite loss; last good weights restored")'),
    ),
    case(
        "NaN cleaned inside a logarithm is arithmetic; inside a histogram or a log, a record",
        """\
        import numpy as np
        import torch
        def loss_fn(probs, writer, step, model):
            loss = -torch.log(torch.nan_to_num(probs)).mean()
            other = -np.log(np.nan_to_num(probs)).mean()
            writer.add_histogram("probs", torch.nan_to_num(probs), step)
            model.log("probs_mean", torch.nan_to_num(probs).mean())
            return loss + other
        """,
        (4, "NZ101"),
        (5, "NZ101"),
    ),
    case(
        "a running total of loss terms whose first term is also taken only when finite",
        """\
        import torch
        class MultiResolutionSTFTLoss(torch.nn.Module):
            def forward(self, x, y):
                count = 0
                for i in range(len(self.stft_losses)):
                    l1 = self.stft_losses[i](x, y)
                    if count > 0:
                        if not torch.isnan(l1.sum()):
                            l1_loss = torch.cat((l1_loss, l1.unsqueeze(-1)), -1)
                            count += 1
                        else:
                            print("nan term")
                    else:
                        if not torch.isnan(l1.sum()):
                            l1_loss = l1.unsqueeze(-1)
                            count += 1
                        else:
                            print("nan term")
                return l1_loss.mean()
        """,
        (8, "NZ107"),
        (14, "NZ107"),
    ),
    case(
        "a gradient norm kept on the trainer, NaN-tested, then the gradients zeroed",
        """\
        import torch
        from torch.nn.utils import clip_grad_norm_
        class Trainer:
            def step(self, loss):
                loss.backward()
                with torch.no_grad():
                    self.norm_before_clip = clip_grad_norm_(self.actor.parameters(), 1.0)
                    if torch.isnan(self.norm_before_clip):
                        for p in self.actor.parameters():
                            p.grad.zero_()
                self.optimizer.step()
        """,
        (10, "NZ201"),
    ),
    case(
        "one mask name for the NaN entries, then re-bound to the entries above a bound",
        """\
        import torch
        def clean(model):
            for p in model.parameters():
                bad = ~torch.isfinite(p.grad)
                p.grad[bad] = 0.0
                bad = p.grad.abs() > 1e6
                p.grad[bad] = 1e6
        """,
        (5, "NZ105"),
    ),
    case(
        "a mask name re-bound to a bound test on one branch only: the NaN mask may reach",
        """\
        import torch
        def clean(grads, strict):
            bad = torch.isnan(grads)
            if strict:
                bad = grads.abs() > 1e6
            grads[bad] = 0.0
            return grads
        """,
        (6, "NZ105"),
    ),
    case(
        "a NaN loss counted (raising after too many) and marked: the mark skips backward and step",
        """\
        import torch
        class Trainer:
            def update(self, total_loss):
                if self.config.skip_nan_loss:
                    if torch.any(torch.isnan(total_loss)).item():
                        self.logger.info("nan loss -> skip")
                        self.skip_nan_loss_counter += 1
                        if self.skip_nan_loss_counter > self.config.max_nan_losses:
                            raise RuntimeError("too many nan losses in a row")
                        self._skip_nan_step = True
                if not self._skip_nan_step:
                    total_loss.backward()
                if not self._skip_nan_step:
                    self.optimizer.step()
                self._skip_nan_step = False
        """,
        (11, "NZ201"),
        (13, "NZ201"),
    ),
    case(
        "a micro-batch's NaN loss clears the gradients and sets a flag the minibatch skips on",
        _minibatch_skipped_on_a_flag(
            ["optimizer.zero_grad(set_to_none=True)", "skip = True", "break"]
        ),
        (8, "NZ201"),
    ),
    case(
        "a NaN loss only logged where it sets the flag the minibatch skips on",
        _minibatch_skipped_on_a_flag(['print("non-finite loss")', "skip = True"]),
        (12, "NZ201"),
    ),
    case(
        "a train step helper catching any error of its backward pass and handing back a failure",
        """\
        import torch
        def train_step(model, batch, scaler=None):
            try:
                loss = model(batch)
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                return loss.item(), True
            except Exception as err:
                if "out of memory" in str(err):
                    torch.cuda.empty_cache()
                return float("inf"), False
        """,
        (10, "NZ301"),
    ),
    case(
        "a helper called per batch catching any error of its update, handing back NaN",
        _update_per_batch('float("nan")'),
        (7, "NZ301"),
    ),
    case(
        "a helper called per batch catching any error of its update, in code naming no NaN",
        _update_per_batch("None"),
    ),
    case(
        "a loop catching any error of its step, in code naming no NaN: left alone",
        """\
        def fit(model, optimizer, loader):
            for batch in loader:
                try:
                    model(batch).backward()
                    optimizer.step()
                except RuntimeError as err:
                    print("step failed:", err)
                    continue
        """,
    ),
    case(
        "a train step helper whose handler re-raises after logging: correct",
        """\
        import logging
        def train_step(model, batch, optimizer):
            try:
                loss = model(batch)
                loss.backward()
                optimizer.step()
            except Exception:
                logging.exception("step failed")
                raise
        """,
    ),
    case(
        "an evaluation helper catching any error of its forward pass: nothing steps",
        """\
        def eval_step(model, batch):
            try:
                return model(batch).item()
            except Exception:
                return float("nan")
        """,
    ),
    case(
        "a loss term set to 0 on any error, in code that names no non-finite value",
        """\
        import torch.nn.functional as F
        def distillation_loss(student_logits, teacher_logits, labels):
            ce = F.cross_entropy(student_logits, labels)
            try:
                kd = F.kl_div(student_logits.log_softmax(-1), teacher_logits.softmax(-1))
            except Exception:
                kd = 0.0
            return ce + kd
        """,
    ),
    case(
        "the last good weights loaded on a NaN loss, then the training loop left: a halt",
        _rolled_back("break"),
    ),
    case(
        "a Keras callback putting back the weights of the epoch's start on a NaN batch loss",
        """\
        import numpy as np
        import tensorflow as tf
        class RestoreOnNaN(tf.keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.good = self.model.get_weights()
            def on_train_batch_end(self, batch, logs=None):
                if np.isnan(logs["loss"]):
                    self.model.set_weights(self.good)
        """,
        (8, "NZ410"),
    ),
    case(
        "a Keras callback loading the last good weights file on a NaN batch loss",
        """\
        import math
        import keras
        class Rollback(keras.callbacks.Callback):
            def on_batch_end(self, batch, logs=None):
                loss = logs.get("loss")
                if loss is not None and math.isnan(loss):
                    self.model.load_weights("last_good.weights.h5")
        """,
        (7, "NZ410"),
    ),
    case(
        "a Keras callback putting back the best weights on a NaN loss and stopping: a halt",
        """\
        import numpy as np
        import tensorflow as tf
        class StopOnNaN(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if np.isnan(logs["loss"]):
                    self.model.set_weights(self.best_weights)
                    self.model.stop_training = True
        """,
    ),
    case(
        "gradients cleared on a NaN loss before the training loop is left: a halt",
        """\
        import torch
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                if torch.isnan(loss):
                    print("NaN loss, stopping")
                    optimizer.zero_grad()
                    break
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """,
    ),
    case(
        "models put back after every inner run, the meta-step only taken when finite",
        """\
        import copy
        def meta_train(model, alpha, optimizer_alpha, tasks, finetune):
            for task in tasks:
                saved = copy.deepcopy(model.state_dict())
                loss, is_nan = finetune(model, task)
                if not is_nan:
                    optimizer_alpha.zero_grad()
                    (alpha * loss).backward()
                    optimizer_alpha.step()
                    model.load_state_dict(saved)
                else:
                    model.load_state_dict(saved)
        """,
        (6, "NZ201"),
    ),
    *opt_in_or_not(
        "a GradScaler built in a trainer's constructor, stepped elsewhere",
        """\
        import torch
        class Trainer:
            def __init__(self, model, optimizer, use_amp):
                self.model = model
                self.optimizer = optimizer
                self.scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
                self.eval_scaler = torch.cuda.amp.GradScaler(enabled=False)
        """,
        every_rule=[(6, "NZ406")],
    ),
    case(
        "a grad-norm skip that passes over the GradScaler's step and update is the code's own",
        _scaled_loop_skipping(["optimizer.zero_grad(set_to_none=True)", "continue"]),
        (9, "NZ201"),
    ),
    *opt_in_or_not(
        "a skip that lowers the scale itself is the scaler's",
        _scaled_loop_skipping(
            ["scaler.update(scaler.get_scale() / 2)", "optimizer.zero_grad()", "continue"]
        ),
        every_rule=[(10, "NZ406"), (12, "NZ406")],
    ),
    case(
        "NaN tests held in names through conditional expressions",
        """\
        import math
        import torch
        def train(model, loader, optimizer):
            for batch in loader:
                loss = model(batch)
                nan = torch.isnan(loss).any().item() if loss.numel() > 1 else math.isnan(loss)
                if nan:
                    continue
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """,
        (8, "NZ201"),
    ),
    case(
        "loss terms summed through a filter whose predicate rejects NaN",
        """\
        import torch
        class ModelLoss:
            @staticmethod
            def _valid_loss(val):
                if not torch.is_tensor(val):
                    return False
                return not torch.isnan(val)
            def get_loss(self):
                return sum(filter(self._valid_loss, [w * v for w, v in self.loss_terms]))
        def total(losses):
            return sum(filter(lambda t: torch.isfinite(t), losses))
        def words(lines):
            return list(filter(lambda s: s.strip(), lines))
        """,
        (9, "NZ107"),
        (11, "NZ107"),
    ),
    case(
        "finite step losses kept per epoch for the report, after the step",
        """\
        import numpy as np
        def fit(trainer, loader):
            epoch_losses = {}
            for batch in loader:
                losses = trainer.train_step(batch)
                for k, v in losses.items():
                    epoch_losses.setdefault(k, [])
                    if not np.isnan(v):
                        epoch_losses[k].append(v)
            return {k: float(np.mean(v)) for k, v in epoch_losses.items()}
        """,
    ),
    case(
        "a handler that re-raises only out-of-memory errors goes on from all the others",
        """\
        import logging
        import torch
        def train(model, loader, optimizer):
            for batch in loader:
                try:
                    loss = model(batch)
                    if not torch.isfinite(loss):
                        logging.warning("non-finite loss")
                    loss.backward()
                    optimizer.step()
                except RuntimeError as e:
                    if "out of memory" in str(e).lower():
                        raise e
                    else:
                        logging.error("runtime error during training: %s", e)
                        continue
        """,
        (11, "NZ301"),
    ),
    case(
        "a handler that re-raises NaN errors and goes on from out-of-memory ones",
        """\
        import torch
        def train(model, loader, optimizer):
            for batch in loader:
                try:
                    loss = model(batch)
                    loss.backward()
                    optimizer.step()
                except RuntimeError as e:
                    if "nan" in str(e).lower():
                        raise
                    torch.cuda.empty_cache()
                    continue
        """,
    ),
    case(
        "JAX step metrics: the loss read from the metrics dict, the last checkpoint restored",
        """\
        import numpy as np
        def fit(state, batches, train_step, mngr):
            for batch in batches:
                state, metrics = train_step(state, batch)
                if np.isnan(metrics["loss"]) or np.isinf(metrics["grad_norm"]):
                    restored = mngr.restore(mngr.best_step())["state"]
                    state = state.replace(params=restored["params"])
        """,
        (6, "NZ410"),
    ),
    *opt_in_or_not(
        "a flax DynamicScale built for half precision",
        """\
        import jax.numpy as jnp
        from flax.training import dynamic_scale as dynamic_scale_lib
        def create_train_state(params, tx, half_precision):
            dynamic_scale = None
            if half_precision:
                dynamic_scale = dynamic_scale_lib.DynamicScale()
            return TrainState.create(params=params, tx=tx, dynamic_scale=dynamic_scale)
        """,
        every_rule=[(6, "NZ406")],
    ),
    case(
        "gradients of tensors named weight or weights are gradients",
        """\
        import torch
        def fix(model, volume):
            torch.nan_to_num_(model.fc.weight.grad, 0)
            torch.nan_to_num_(volume.budget_weights.grad, 0)
            cfg_grad = torch.nan_to_num(config.grad)
        """,
        (3, "NZ101"),
        (4, "NZ101"),
    ),
    case(
        "detached copies handed to a helper that cleans them for target assignment",
        """\
        import torch
        def assign_targets(scores, boxes):
            scores = torch.nan_to_num(scores, nan=0.0)
            return scores.argmax(-1), boxes
        def loss_fn(model, batch):
            scores, boxes = model(batch)
            targets = assign_targets(scores.detach(), boxes.detach().clone())
            return torch.nn.functional.cross_entropy(scores, targets[0])
        """,
    ),
    case(
        "a log line taken every N steps or on a NaN loss: the NaN test is not gated",
        """\
        import numpy as np
        def train(loader, step_fn, log_freq):
            for itr, batch in enumerate(loader):
                loss = step_fn(batch)
                if itr % log_freq == 0 or np.isnan(loss) or np.isinf(loss):
                    print(itr, loss)
        """,
        (5, "NZ203"),
        every_rule=True,
    ),
]

# ---- the same reactions behind every finiteness test ---------------------------------
TESTS = {
    "torch.isnan": "torch.isnan(loss)",
    "torch.isinf": "torch.isinf(loss)",
    "not isfinite": "not torch.isfinite(loss)",
    "math.isnan item": "math.isnan(loss.item())",
    "self comparison": "loss != loss",
    "equals inf": "loss == float('inf')",
    "any isnan of grads": "any(torch.isnan(p.grad).any() for p in model.parameters())",
}
REACTIONS = {
    "continue": ("continue", "NZ201"),
    "zero_grad": ("optimizer.zero_grad()", "NZ201"),
    "pass": ("pass", "NZ201"),
    "log only": ("logger.warning('non-finite loss')", "NZ203"),
    "count only": ("bad_steps += 1", "NZ202"),
    "replace": ("loss = torch.zeros_like(loss)", "NZ201"),
}
SAFE = {
    "raise": "raise FloatingPointError('non-finite loss')",
    "check_finite": "check_finite(loss=loss, grad_norm=0.0, step=step)",
    "exit": "sys.exit(3)",
    # leaving the training loop itself ends the run (``_epochs`` below: a break that
    # leaves one epoch's loop is a skip)
    "break out of the training loop": "break",
}


def _loop(test: str, body: str) -> str:
    return (
        "import math\nimport sys\nimport torch\nfrom nozero import check_finite\n"
        "for step, batch in enumerate(loader):\n"
        "    loss = model(batch)\n"
        f"    if {test}:\n"
        f"        {body}\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
    )


def _epochs(test: str, body: str) -> str:
    """``_loop`` inside a loop over epochs."""
    inner = _loop(test, body).split("for step", 1)[1]
    head = "import math\nimport sys\nimport torch\nfrom nozero import check_finite\n"
    return head + "for epoch in range(3):\n" + textwrap.indent("for step" + inner, "    ")


GENERATED = (
    [
        Case(
            f"{test_name} then {reaction_name}",
            _loop(test, body),
            ((7 if code in ("NZ202", "NZ203") else 8, code),),
            every_rule=code == "NZ203",  # opt-in: a check that only logs
        )
        for (test_name, test), (reaction_name, (body, code)) in itertools.product(
            TESTS.items(), REACTIONS.items()
        )
    ]
    + [
        Case(f"{test_name} then log only, default rules", _loop(test, REACTIONS["log only"][0]))
        for test_name, test in TESTS.items()
    ]
    + [
        Case(f"{test_name} then break out of one epoch", _epochs(test, "break"), ((9, "NZ201"),))
        for test_name, test in TESTS.items()
    ]
    + [
        Case(f"{test_name} then {safe_name}", _loop(test, body))
        for (test_name, test), (safe_name, body) in itertools.product(TESTS.items(), SAFE.items())
    ]
)

# The same predicate shapes on input data, metrics and plots: nothing to report.
NOT_SIGNAL = {
    "features": "np.isnan(features).any()",
    "labels": "np.isinf(labels).any()",
    "val_loss": "math.isnan(val_loss)",
    "accuracy": "not math.isfinite(accuracy)",
}
for (value_name, test), reaction_name in itertools.product(
    NOT_SIGNAL.items(), ("continue", "replace", "log only")
):
    body = {"continue": "continue", "replace": "features = 0.0", "log only": "print('bad')"}
    GENERATED.append(
        Case(
            f"{value_name} then {reaction_name}",
            "import math\nimport numpy as np\nfor features, labels, val_loss, accuracy in rows:\n"
            f"    if {test}:\n        {body[reaction_name]}\n",
        )
    )

# Device-side selects between new and old state (JAX), by every finiteness source.
FLAGS = {
    "isfinite of the loss": "jnp.isfinite(loss)",
    "all isfinite of the grad norm": "jnp.all(jnp.isfinite(optax.global_norm(grads)))",
    "not isnan of the loss": "~jnp.isnan(loss)",
    "tree_all over grads": (
        "optax.tree.all(jax.tree.map(lambda g: jnp.all(jnp.isfinite(g)), grads))"
    ),
}
SELECTS = {
    "where in a tree map": "jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)",
    "lax.select in a tree map": (
        "jax.tree.map(lambda n, o: lax.select(ok, n, o), new_params, params)"
    ),
    "partial where": "jax.tree.map(functools.partial(jnp.where, ok), new_params, params)",
}


def _select_step(flag: str, select: str, recorded: bool) -> str:
    back = "params, ok" if recorded else "params"
    return (
        "import functools\nimport jax\nimport jax.numpy as jnp\nimport optax\nfrom jax import lax\n"
        "def train_step(params, opt_state, batch):\n"
        "    loss, grads = jax.value_and_grad(loss_fn)(params, batch)\n"
        "    new_params = optax.apply_updates(params, grads)\n"
        f"    ok = {flag}\n"
        f"    params = {select}\n"
        f"    return {back}\n"
    )


for (flag_name, flag), (select_name, select) in itertools.product(FLAGS.items(), SELECTS.items()):
    GENERATED.append(
        Case(f"{select_name} on {flag_name}", _select_step(flag, select, False), ((10, "NZ410"),))
    )
    GENERATED.append(
        Case(f"{select_name} on {flag_name}, flag returned", _select_step(flag, select, True))
    )

# fp16 loss-scaling shapes: the opt-in rule reports them, the default rules do not.
SCALER_SOURCES = {
    "has_overflow": "self.overflow = self.checker.has_overflow(self.params)",
    "check_using_norm": "self.overflow = self.checker.check_using_norm(self.norms)",
    "found_inf": "found_inf = self.scaler.unscale_grads(self.optimizer)",
}
SCALER_REACTIONS = {"return": "return", "zero_grad": "self.zero_grad()"}


def _scaler_step(source: str, reaction: str, scaled: bool) -> str:
    flag = "self.overflow" if "overflow" in source else "found_inf"
    return (
        "class Optimizer:\n"
        "    def step(self):\n"
        f"        {source}\n"
        + (f"        self._update_scale({flag})\n" if scaled else "")
        + f"        if {flag}:\n"
        f"            {reaction}\n"
        "        self.optimizer.step()\n"
    )


# The flag's name is no evidence of loss scaling: only the scale being adjusted is.
for (source_name, source), (reaction_name, reaction) in itertools.product(
    SCALER_SOURCES.items(), SCALER_REACTIONS.items()
):
    program = _scaler_step(source, reaction, scaled=True)
    shape = f"{source_name} then {reaction_name}"
    GENERATED.append(Case(f"{shape}, scale updated, every rule", program, ((6, "NZ406"),), True))
    GENERATED.append(Case(f"{shape}, scale updated, default rules", program))
    unscaled = _scaler_step(source, reaction, scaled=False)
    GENERATED.append(Case(f"{shape}, no scale update", unscaled, ((5, "NZ201"),)))

# A forward helper hands back None for a NaN loss; what its caller does with None decides.
NONE_CALLERS = {
    "skips on is None": (["if out is None:", "    continue"], ((9, "NZ201"),)),
    "skips on not": (["if not out:", "    skipped += 1", "    continue"], ((9, "NZ201"),)),
    "raises on None": (["if out is None:", "    raise RuntimeError('no loss')"], ()),
    "uses it as it is": (["pass"], ()),
}
NONE_FOR_NAN = """\
import torch
class Distiller:
    def safe_forward(self, batch):
        logits = self.student(batch.input_ids).logits
        loss = self.criterion(logits, batch.labels)
        if torch.isnan(loss) or torch.isinf(loss):
            print("non-finite loss, skipping batch")
            self.bad_batches += 1
            return None
        return loss
    def train(self, loader, skipped=0):
        for batch in loader:
            out = self.safe_forward(batch)
CALLER
            out.backward()
            self.optimizer.step()
"""

for caller_name, (caller, expected) in NONE_CALLERS.items():
    program = NONE_FOR_NAN.replace("CALLER", "\n".join(" " * 12 + line for line in caller))
    GENERATED.append(
        Case(f"None handed back for a NaN loss, the caller {caller_name}", program, expected)
    )

# A helper counts the non-finite gradients; what reads the count decides.
COUNT_READERS = {
    "skips when above 0": (["if bad > 0:", "    optimizer.zero_grad()", "    continue"], 13),
    "skips when not 0": (["if bad != 0:", "    continue"], 13),
    "raises when above 0": (["if bad > 0:", "    raise FloatingPointError(f'{bad} bad')"], None),
    "only logs it": (["print(f'{bad} non-finite gradients')"], None),
}
COUNTED = """\
import torch
def count_nonfinite(params):
    nonfinite = 0
    for p in params:
        if not torch.isfinite(p.grad).all():
            nonfinite += 1
    return nonfinite, len(params)
def train(model, loader, optimizer):
    for batch in loader:
        model(batch).backward()
        bad, total = count_nonfinite(list(model.parameters()))
READER
        optimizer.step()
"""

for reader_name, (reader, line) in COUNT_READERS.items():
    program = COUNTED.replace("READER", "\n".join(" " * 8 + part for part in reader))
    expected = ((line, "NZ201"),) if line else ()
    GENERATED.append(Case(f"a count of non-finite gradients, {reader_name}", program, expected))

# A loss term with a short name zeroed beside a GradScaler: the scaler never touches a
# loss, so the zeroing is the code's own, whatever the term is called.
for term in ("ce", "kd", "loss_ce"):
    GENERATED.append(
        Case(
            f"a NaN loss term named {term} zeroed beside a GradScaler",
            "import torch\n"
            "def train(model, loader, optimizer, scaler):\n"
            "    for batch in loader:\n"
            "        with torch.autocast('cuda'):\n"
            f"            {term} = criterion(model(batch.x), batch.y)\n"
            f"            if torch.isnan({term}):\n"
            f"                {term} = torch.tensor(0.0)\n"
            f"        scaler.scale({term}).backward()\n"
            "        scaler.step(optimizer)\n"
            "        scaler.update()\n",
            ((7, "NZ106"),),
        )
    )

# A loss component set to 0 when NaN: only kept for the record, or trained with.
LOSS_PART_READERS = {
    "added into a record": ("totals['vlb'] += loss_vlb", ()),
    "logged": ("logger.info(f'vlb {loss_vlb}')", ()),
    "added to the loss": ("loss = loss + loss_vlb", ((8, "NZ106"),)),
}
LOSS_PART = """\
import torch
def train(model, loader, optimizer, totals):
    for batch in loader:
        loss, logs = model(batch)
        loss_vlb = logs.get("train/loss_vlb", 0.0)
        if torch.isnan(torch.tensor(loss_vlb)):
            print("invalid loss_vlb")
            loss_vlb = 0.0
        READER
        loss.backward()
        optimizer.step()
"""
for reader_name, (reader, expected) in LOSS_PART_READERS.items():
    program = LOSS_PART.replace("READER", reader)
    GENERATED.append(Case(f"a NaN loss part set to 0, then {reader_name}", program, expected))

# Loss terms summed through a comprehension that keeps only the finite ones.
COMPREHENSIONS = {
    "sum of a generator, not isnan": ("sum(t for t in terms.values() if not torch.isnan(t))", 6),
    "stack of a list, isfinite": ("torch.stack([t for t in terms if torch.isfinite(t)]).sum()", 6),
    "sum of the terms that are not None": ("sum(t for t in terms if t is not None)", None),
}
for shape, (gathered, line) in COMPREHENSIONS.items():
    program = (
        "import torch\n"
        "def train(model, loader, optimizer):\n"
        "    for batch in loader:\n"
        "        terms = model.loss_terms(batch)\n"
        "        optimizer.zero_grad()\n"
        f"        loss = {gathered}\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
    )
    expected = ((line, "NZ107"),) if line else ()
    GENERATED.append(Case(f"loss terms gathered by a comprehension, {shape}", program, expected))
GENERATED.append(
    Case(
        "the loss's float value for the logs, without its NaN terms",
        "import torch\n"
        "class Loss:\n"
        "    def float_value(self):\n"
        "        terms = self.loss_terms.values()\n"
        "        return sum(t.detach().item() for t in terms if not torch.isnan(t))\n",
    )
)
GENERATED.append(
    Case(
        "finite metric values averaged by a comprehension for the logs",
        "import numpy as np\n"
        "def report(history, logger):\n"
        "    scores = [m for m in history['val_score'] if np.isfinite(m)]\n"
        "    logger.info(np.mean(scores))\n",
    )
)

# A loss that keeps only the entries where the prediction is finite drops the model's
# non-finite outputs; one that masks only missing targets drops no prediction.
MASKED_LOSSES = {
    "a mean of squared masked differences": "((pred[ok] - target[ok]) ** 2).mean()",
    "a functional loss on masked entries": "torch.nn.functional.mse_loss(pred[ok], target[ok])",
    "the parent loss on masked entries": "super().forward(pred[ok], target[ok])",
}
for shape, computed in MASKED_LOSSES.items():
    for tested, expected in (
        ("~torch.isnan(pred) & ~torch.isnan(target)", ((5, "NZ107"),)),
        ("~torch.isnan(target)", ()),
    ):
        program = (
            "import torch\n"
            "class MaskedMSE(torch.nn.MSELoss):\n"
            "    def forward(self, pred, target):\n"
            f"        ok = {tested}\n"
            f"        return {computed}\n"
        )
        masked = "predictions and targets" if expected else "targets only"
        GENERATED.append(Case(f"{shape}, {masked} masked", program, expected))

# nanmean in what a factory named for a loss hands back is the loss; in a metric's, a
# measure for the logs.
for factory, expected in (("get_rh_loss", ((5, "NZ107"),)), ("get_rh_metric", ())):
    GENERATED.append(
        Case(
            f"nanmean in the closure {factory} hands back",
            "import torch\n"
            f"def {factory}(scale):\n"
            "    def metric(pred, true):\n"
            "        diff = scale * (pred - true)\n"
            "        err = torch.nanmean(torch.square(diff))\n"
            "        return err\n"
            "    return metric\n",
            expected,
        )
    )

# ... and a tuple led by None, taken apart by the caller or read by index.
NONE_LED = {
    "unpacked": ("out, logs = self.safe_forward(batch)", "if out is None:"),
    "read by index": ("result = self.safe_forward(batch)", "if result[0] is None:"),
}
for way, (call, test) in NONE_LED.items():
    program = (
        "import torch\n"
        "class Distiller:\n"
        "    def safe_forward(self, batch):\n"
        "        loss = self.criterion(self.student(batch.x), batch.y)\n"
        "        if torch.isnan(loss):\n"
        "            return None, 0.0\n"
        "        return loss, loss.item()\n"
        "    def train(self, loader):\n"
        "        for batch in loader:\n"
        f"            {call}\n"
        f"            {test}\n"
        "                continue\n"
        "            self.optimizer.step()\n"
    )
    GENERATED.append(Case(f"a tuple led by None for a NaN loss, {way}", program, ((6, "NZ201"),)))

CASES = HAND_WRITTEN + GENERATED


def test_the_corpus_is_large_and_covers_both_kinds():
    assert len(CASES) >= 150
    assert sum(1 for c in CASES if c.expected) >= 60
    assert sum(1 for c in CASES if not c.expected) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "no-shortcuts"])
@pytest.mark.parametrize("item", CASES, ids=lambda c: c.name)
def test_corpus_case(item: Case, shortcuts: bool):
    select = ALL_CODES if item.every_rule else None
    findings = lint_source(item.source, "train.py", select=select, shortcuts=shortcuts)
    assert [(f.line, f.code) for f in findings] == list(item.expected), (item.source, findings)
