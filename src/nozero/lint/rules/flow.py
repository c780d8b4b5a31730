"""NZ2xx, NZ106, NZ107, NZ406, NZ410: reactions to a non-finite value, found by the
whole-file finiteness flow pass (``nozero.lint.facts``) rather than by matching nodes.

Each rule takes the reactions of one kind; the route (where the fact was established,
and how it reached the reaction) is named in the message.
"""

from __future__ import annotations

from typing import ClassVar

from nozero.lint.facts.flows import Reaction
from nozero.lint.rules.base import Example, Rule


class FlowRule(Rule):
    """A rule fed by the flow pass: the reactions of ``kinds``, inside or outside fp16
    dynamic loss scaling."""

    kinds: ClassVar[frozenset[str]]
    scaling: ClassVar[bool] = False

    def takes(self, reaction: Reaction) -> bool:
        return reaction.kind in self.kinds and reaction.scaling == self.scaling


class SkipStepOnNonFinite(FlowRule):
    code = "NZ201"
    kinds = frozenset(
        {"skip", "skip_flag", "zero", "zero_value", "constant_value", "late_skip", "not_taken"}
        | {"skip_by_caller"}
    )
    VALID = [
        Example("""\
            import math
            if math.isnan(loss):
                raise FloatingPointError('nan loss')
            """),
        Example("""\
            import numpy as np
            for row in rows:
                if np.isnan(row).any():
                    continue
            """),
        Example("""\
            import math
            def bad(loss):
                if math.isnan(loss):
                    return True
                return False
            """),
        Example("""\
            import math
            from nozero import check_finite
            if math.isnan(loss):
                check_finite(loss=loss, grad_norm=gn, step=step)
            """),
        Example("""\
            import math
            def first_bad(history):
                for step, (loss, gn) in enumerate(history):
                    if not math.isfinite(loss):
                        return step, loss
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            class SkipNanLoss(Callback):
                def after_backward(self, loss):
                    if torch.isnan(loss):
                        self.skip_next_update = True
            """,
            line=5,
        ),
        Example(
            """\
            import torch
            for batch in loader:
                loss = model(batch)
                if torch.isnan(loss):
                    optimizer.zero_grad()
                    continue
            """,
            line=5,
        ),
        Example(
            """\
            import jax.numpy as jnp
            def step(state, grads):
                if not jnp.isfinite(grads).all():
                    return state
                return apply(state)
            """,
            line=4,
        ),
        Example(
            """\
            for batch in loader:
                loss = compute(batch)
                if loss != loss:
                    pass
            """,
            line=4,
        ),
        Example(
            """\
            import math
            def is_bad(x):
                return math.isnan(x) or math.isinf(x)
            for b in data:
                loss = compute_loss(b)
                if is_bad(loss):
                    continue
                optimizer.step()
            """,
            line=7,
        ),
        Example(
            """\
            import torch
            if torch.isfinite(loss):
                optimizer.step()
            """,
            line=2,
        ),
        Example(
            """\
            import numpy as np
            class OptimizerWrapper:
                def step(self, total_norm: float) -> None:
                    if np.isfinite(total_norm):
                        self.optimizer.step()
            """,
            line=4,
        ),
        Example(
            """\
            import jax.numpy as jnp
            def train_step(params, opt_state, batch):
                loss, grads = grad_fn(params, batch)
                if jnp.isnan(loss):
                    return params, opt_state, loss
                return update(params, opt_state, grads)
            """,
            line=5,
        ),
        Example(
            """\
            import torch
            def step(self):
                finite = torch.isfinite(self.grad_norm()).all()
                if not finite:
                    print("skipping")
                    return
                self.optimizer.step()
            """,
            line=6,
        ),
        Example(
            """\
            import torch
            def step(self, retry):
                bad_batch = False
                if not torch.isfinite(self.grad_norm):
                    if retry:
                        bad_batch = True
                    else:
                        raise FloatingPointError("gradients are not finite")
                if bad_batch:
                    self.zero_grad()
                    return
                self.optimizer.step()
            """,
            line=10,
        ),
    ]


class ContinuesPastNonFinite(FlowRule):
    code = "NZ202"
    kinds = frozenset({"go_on"})
    VALID = [
        Example("""\
            import math
            if not math.isfinite(loss):
                logger.error('nan')
                raise SystemExit(1)
            """),
        Example("""\
            import math
            if math.isfinite(score):
                best = max(best, score)
            """),
        Example("""\
            import math
            def describe(loss):
                notes = []
                if not math.isfinite(loss):
                    notes.append('the loss was not finite')
                return notes
            """),
        Example("""\
            import math
            for batch in loader:
                loss = train_step(batch)
                if math.isnan(loss):
                    log.warning('nan loss')
            """),
    ]
    INVALID = [
        Example(
            """\
            import math
            while True:
                loss = step()
                if not math.isfinite(loss):
                    bad_steps += 1
                    if bad_steps > patience:
                        raise FloatingPointError('loss is not finite')
            """,
            line=4,
        ),
        Example(
            """\
            import torch
            class Brain:
                def check_gradients(self, loss):
                    if not torch.isfinite(loss):
                        self.nonfinite_count += 1
                        if self.nonfinite_count > self.patience:
                            raise ValueError("patience exhausted")
                        logger.warning("patience not yet exhausted")
                def fit_batch(self, batch):
                    loss = self.compute_loss(batch)
                    loss.backward()
                    self.check_gradients(loss)
                    self.optimizer.step()
            """,
            line=4,
        ),
    ]


class NonFiniteCheckOnlyLogs(FlowRule):
    code = "NZ203"
    kinds = frozenset({"log_only"})
    VALID = [
        Example("""\
            import torch
            from nozero import check_finite
            for step, batch in enumerate(loader):
                loss = model(batch)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                if not torch.isfinite(loss):
                    logger.error("non-finite loss at step %d", step)
                    check_finite(step, loss, grad_norm)
                optimizer.step()
            """),
        Example("""\
            import math
            for batch in loader:
                loss = train_step(batch)
                if math.isnan(loss):
                    bad_steps += 1
            """),
        Example("""\
            import math
            def summarize(scores):
                for name, score in scores.items():
                    if not math.isfinite(score):
                        print(f"{name}: no score")
            """),
    ]
    INVALID = [
        Example(
            """\
            import math
            while True:
                loss = step()
                if not math.isfinite(loss):
                    logger.warning('non-finite loss')
            """,
            line=4,
        ),
        Example(
            """\
            import math
            for batch in loader:
                loss = train_step(batch)
                if math.isnan(loss):
                    log.warning('nan loss')
            """,
            line=4,
        ),
        Example(
            """\
            import torch
            for batch in loader:
                loss = model(batch)
                bad = torch.isnan(loss).any()
                if bad:
                    logger.debug("non-finite=%s", bad)
                loss.backward()
            """,
            line=5,
        ),
        Example(
            """\
            import torch
            class Trainer:
                def fit_batch(self, batch):
                    loss = self.compute_loss(batch)
                    loss.backward()
                    self.check_loss(loss)
                    self.optimizer.step()
                def check_loss(self, loss):
                    if not torch.isfinite(loss):
                        logger.warning("non-finite loss; stepping anyway")
            """,
            line=9,
        ),
    ]


class ValueReplacedOnNonFinite(FlowRule):
    code = "NZ106"
    kinds = frozenset({"replace", "clamp_loss"})
    VALID = [
        Example("""\
            import math
            def report(history):
                for acc in history:
                    if math.isnan(acc):
                        acc = 0.0
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            for batch in loader:
                loss = model(batch)
                if torch.isnan(loss) or torch.isinf(loss):
                    loss = running_loss / max(steps, 1)
                running_loss += loss
            """,
            line=5,
        ),
        Example(
            """\
            import torch
            def training_step(self, args, tr_loss, tr_loss_step):
                if args.nan_inf_filter and (torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)):
                    tr_loss = tr_loss + tr_loss / (1 + self.state.global_step)
                else:
                    tr_loss = tr_loss + tr_loss_step
                return tr_loss
            """,
            line=4,
        ),
    ]


class NonFiniteSamplesDropped(FlowRule):
    code = "NZ107"
    kinds = frozenset({"drop", "drop_term", "nan_drop"})
    VALID = [
        Example("""\
            import numpy as np
            def load(features):
                return features[np.isfinite(features).all(axis=1)]
            """),
        Example("""\
            import numpy as np
            def mean_absolute_error(y, y_hat):
                return np.nanmean(np.abs(y - y_hat))
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            losses = criterion(logits, targets)
            loss = losses[torch.isfinite(losses)].mean()
            """,
            line=3,
        ),
        Example(
            """\
            import torch
            def compute_loss(per_sample_loss):
                keep = ~torch.isnan(per_sample_loss)
                return per_sample_loss[keep].mean()
            """,
            line=4,
        ),
        Example(
            """\
            import torch
            def forward(self, logits, targets):
                ctc_loss = self.ctc(logits, targets, reduction="none")
                finite = torch.isfinite(ctc_loss)
                ctc_loss = ctc_loss[finite]
                return ctc_loss.sum()
            """,
            line=5,
        ),
        Example(
            """\
            def training_step(self, batch):
                losses = self.criterion(self.model(batch.x), batch.y)
                loss = losses.nanmean()
                loss.backward()
            """,
            line=3,
        ),
    ]


class DynamicLossScaleSkip(FlowRule):
    code = "NZ406"
    kinds = frozenset(
        {
            "skip",
            "skip_flag",
            "zero",
            "zero_value",
            "constant_value",
            "skip_by_caller",
            "late_skip",
            "not_taken",
            "replace",
            "drop",
            "drop_term",
            "keep",
            "sentinel",
            "scaler_step",
            "scaler_built",
            "apex_scale",
        }
    )
    scaling = True
    VALID = [
        Example("""\
            import torch
            for batch in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(batch)
                loss.backward()
                optimizer.step()
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            def step(self, groups):
                overflow = self.checker.has_overflow(groups)
                self.loss_scaler.update_scale(overflow)
                if overflow:
                    return False
                self.optimizer.step()
                return True
            """,
            line=6,
        ),
        Example(
            """\
            class Optimizer:
                def check(self, norms):
                    self.overflow = self.checker.check_using_norm(norms)
                    self._update_scale(self.overflow)

                def step(self):
                    self.check(self.norms())
                    if self.overflow:
                        self.zero_grad()
                        return
                    self.optimizer.step()
            """,
            line=9,
        ),
        Example(
            """\
            import functools
            import jax
            import jax.numpy as jnp
            def train_step(state, batch):
                grad_fn = state.dynamic_scale.value_and_grad(loss_fn)
                dynamic_scale, is_fin, loss, grads = grad_fn(state.params, batch)
                new_state = state.apply_gradients(grads=grads)
                select = functools.partial(jnp.where, is_fin)
                params = jax.tree.map(select, new_state.params, state.params)
                return new_state.replace(params=params)
            """,
            line=8,
        ),
        Example(
            """\
            def train_step(self, sample):
                try:
                    self.optimizer.step()
                except OverflowError:
                    logger.info("loss scale %s", self.optimizer.scaler.loss_scale)
                    self.zero_grad()
            """,
            line=6,
        ),
        Example(
            """\
            from apex import amp
            for batch in loader:
                with amp.scale_loss(model(batch), optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
            """,
            line=3,
        ),
        Example(
            """\
            import tensorflow as tf
            class Scaled(tf.keras.mixed_precision.LossScaleOptimizer):
                def apply(self, grads, weights):
                    finite = self.check_finite(grads)
                    return tf.cond(finite, lambda: self.inner.apply(grads, weights), lambda: None)
            """,
            line=5,
        ),
    ]


class Fp16OverflowClamp(FlowRule):
    code = "NZ408"
    kinds = frozenset({"clamp"})
    VALID = [
        Example("""\
            import torch
            def forward(self, hidden_states):
                return torch.clamp(hidden_states, min=-1.0, max=1.0)
            """),
    ]
    INVALID = [
        Example(
            """\
            import torch
            def forward(self, hidden_states):
                if self.training and not torch.isfinite(hidden_states).all():
                    clamp_value = torch.finfo(hidden_states.dtype).max - 1000
                    hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
                return hidden_states
            """,
            line=5,
        ),
        Example(
            """\
            import torch
            def forward(self, hidden_states):
                clamp_value = torch.where(
                    torch.isinf(hidden_states).any(),
                    torch.finfo(hidden_states.dtype).max - 1000,
                    torch.finfo(hidden_states.dtype).max,
                )
                return torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
            """,
            line=3,
        ),
    ]

    def takes(self, reaction: Reaction) -> bool:
        return reaction.kind in self.kinds  # with fp16 words around it or not


class KeepOldOnNonFinite(FlowRule):
    code = "NZ410"
    kinds = frozenset({"keep"})
    VALID = [
        Example("""\
            import jax, jax.numpy as jnp
            def step(params, new_params, loss):
                ok = jnp.isfinite(loss)
                params = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
                return params, ok
            """),
        Example("""\
            import jax.numpy as jnp
            logits = jnp.where(mask, logits, other_logits)
            """),
    ]
    INVALID = [
        Example(
            """\
            import jax, jax.numpy as jnp
            def step(params, new_params, loss):
                ok = jnp.isfinite(loss)
                return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
            """,
            line=4,
        ),
        Example(
            """\
            from jax import lax
            import jax.numpy as jnp
            def step(state, grads):
                return lax.cond(jnp.all(jnp.isfinite(grads)), apply, lambda s, g: s, state, grads)
            """,
            line=4,
        ),
        Example(
            """\
            import math
            for batch in loader:
                new_params, loss = update(params, batch)
                params = new_params if math.isfinite(loss) else params
            """,
            line=4,
        ),
        Example(
            """\
            import logging
            import jax, jax.numpy as jnp
            def step(params, new_params, loss):
                ok = jnp.isfinite(loss)
                logging.debug("finite=%s", ok)
                assert params is not None
                return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
            """,
            line=7,
        ),
    ]


RULES: list[type[Rule]] = [
    SkipStepOnNonFinite,
    ContinuesPastNonFinite,
    NonFiniteCheckOnlyLogs,
    ValueReplacedOnNonFinite,
    NonFiniteSamplesDropped,
    DynamicLossScaleSkip,
    Fp16OverflowClamp,
    KeepOldOnNonFinite,
]
