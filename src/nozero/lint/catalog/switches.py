"""NZ4xx rules' metadata: library switches that zero, skip or hide non-finite values."""

from __future__ import annotations

from nozero.lint.catalog.entry import RuleEntry

ENTRIES: tuple[RuleEntry, ...] = (
    RuleEntry(
        code="NZ401",
        name="optax-apply-if-finite",
        message="optax.apply_if_finite skips non-finite updates and keeps training",
        default=True,
        doc="""\
## What it flags
`optax.apply_if_finite(optimizer, max_consecutive_errors)`, under any import alias.

## Why it is harmful
It drops every update with a NaN or Inf and carries on until a number of *consecutive*
failures: isolated bad steps are never reported, and the run's statistics silently
include skipped batches.

## Example
```python
tx = optax.apply_if_finite(optax.adamw(1e-3), max_consecutive_errors=5)
```

## Use instead
Keep the plain optimizer and check the loss and the global gradient norm every step,
raising the documented error (`nozero.check_finite`).
```python
import optax

from nozero import check_finite

tx = optax.adamw(1e-3)
loss, grads = loss_and_grads(params, batch)
check_finite(step, loss, optax.global_norm(grads))
```
""",
    ),
    RuleEntry(
        code="NZ402",
        name="optax-zero-nans",
        message="optax.zero_nans replaces NaN updates with zeros",
        default=True,
        doc="""\
## What it flags
`optax.zero_nans()` in an optimizer chain.

## Why it is harmful
Every NaN in the updates becomes a zero, on every step, with no report: the model keeps
training on whatever part of the gradient survived.

## Example
```python
tx = optax.chain(optax.zero_nans(), optax.adam(1e-3))
```

## Use instead
Drop it, and stop at the first non-finite loss or gradient norm (`nozero.check_finite`).
```python
import optax

tx = optax.adam(1e-3)
```
""",
    ),
    RuleEntry(
        code="NZ403",
        name="optax-skip-not-finite",
        message="optax.skip_not_finite skips accumulated steps with non-finite gradients",
        default=True,
        doc="""\
## What it flags
`optax.skip_not_finite`, typically passed as `should_skip_update_fn` to
`optax.MultiSteps`.

## Why it is harmful
Steps whose gradients hold a NaN or Inf are silently dropped from the accumulation; the
run never says that (or where) it happened.

## Example
```python
tx = optax.MultiSteps(opt, every_k_schedule=4, should_skip_update_fn=optax.skip_not_finite)
```

## Use instead
Leave `should_skip_update_fn` unset and check every step (`nozero.check_finite`).
```python
import optax

tx = optax.MultiSteps(opt, every_k_schedule=4)
```
""",
    ),
    RuleEntry(
        code="NZ404",
        name="error-if-nonfinite-false",
        message="error_if_nonfinite=False lets gradient clipping go on with a non-finite norm",
        default=True,
        doc="""\
## What it flags
`torch.nn.utils.clip_grad_norm_(..., error_if_nonfinite=False)`. Also the same setting
in a configuration dict (`{"error_if_nonfinite": False}`, `dict(error_if_nonfinite=False)`)
or on a config object.

The config of an fp16 loss-scaling optimizer is not flagged here
(`dict(type="AmpOptimWrapper", loss_scale="dynamic", clip_grad=dict(...))`), nor a
clip in a function where a scaler is at work (`scaler.unscale_(optimizer)` before it).
The scaler expects an infinite norm on overflow and skips that step itself. That is
dynamic loss scaling, the opt-in NZ406's concern.

## Why it is harmful
With a NaN or Inf total norm, clipping multiplies every gradient by a non-finite factor
and the optimizer steps on it; the setting says "do not tell me".

## Example
```python
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=False)
```

## Use instead
`error_if_nonfinite=True`, which raises a `RuntimeError` naming the non-finite norm.
```python
import torch

torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
```
""",
    ),
    RuleEntry(
        code="NZ405",
        name="logging-nan-inf-filter",
        message="logging_nan_inf_filter=True hides non-finite losses from the training log",
        default=True,
        doc="""\
## What it flags
Hugging Face's `logging_nan_inf_filter` switched on: an explicit
`TrainingArguments(logging_nan_inf_filter=True)`, a config key or attribute, or a
dataclass field whose default is on (`logging_nan_inf_filter: bool = field(default=True)`).
The loop that implements the filter (a non-finite step loss replaced by the running
average) is NZ106's finding.

## Why it is harmful
The logged loss of a window that contained a NaN or Inf step is replaced by the average
of the finite steps: the log says training is healthy while it is not, and training goes
on.

## Example
```python
args = TrainingArguments(output_dir="out", logging_nan_inf_filter=True)
```

## Use instead
`logging_nan_inf_filter=False`, and a check that stops at the first non-finite loss.
```python
from transformers import TrainingArguments

args = TrainingArguments(output_dir="out", logging_nan_inf_filter=False)
```
""",
    ),
    RuleEntry(
        code="NZ406",
        name="dynamic-loss-scale-skip",
        message="fp16 dynamic loss scaling skips the step on overflow",
        default=False,
        doc="""\
## What it flags
Off by default (enable with `--select NZ406` or `--select ALL`).

Dynamic fp16 loss scaling: an overflow check that skips the optimizer step, keeps the
old parameters or zeroes the gradients, where a dynamic loss scaler is at work. The
scaler is at work in the same function when:

- the scale is adjusted (`cur_scale /= factor`, `self._update_scale(overflow)`,
  `scaler.update()`);
- or a scaler's own API drives the step: `GradScaler`, apex `amp.scale_loss`, flax
  `DynamicScale`'s `is_fin`, Keras `LossScaleOptimizer`, an `optimizer_step_was_skipped`
  attribute, an fp16 optimizer's `overflow`.

It is also at work in a class that implements scaling: a scaler class or subclass, or
one that moves the scale in another method.

Also flagged here: a `GradScaler`'s `step` and apex's `amp.scale_loss`, which skip by
themselves (apex's patched `optimizer.step` is skipped when the scaled gradients
overflow). So is the line that builds a dynamic scaler (`GradScaler(enabled=use_amp)`,
Keras `LossScaleOptimizer(opt)`, flax `DynamicScale()`), unless `enabled=False`: a
trainer often builds it in one place and hands it to a library or a step elsewhere.
So is a non-finite gradient norm replaced by a marker (`-1`) that the overflow check
reads. An `except OverflowError` stays here too, since only a scaler raises it, even
when the scaler shows only on the fp16 side of an AMP switch.

A skip of the code's own that passes over the scaler's `step` and `update` is left to
the default rules (`if not torch.isfinite(norm): continue` before
`scaler.step(optimizer)`). The scaler never hears of that overflow. The skip also runs
in bf16 and fp32 runs.

Left to the default rules:

- a trainer class that merely holds a `GradScaler`: its own code that zeroes NaN
  gradients;
- a check outside the scaler's branch of an AMP switch (`if self.use_amp:
  scaler.step(opt) else: opt.step()`, `if use_fp16 and scaler is not None:`,
  `scaler.get_scale() if scaler else 1.0`): the plain path skips too;
- a skip on a non-finite loss, which is no gradient overflow;
- a NaN term or sample dropped from the loss (NZ107), which no scaler does;
- a flag's name alone (`found_inf`, `overflow`): without a scaler the skip is plain
  zero-and-continue (NZ201 and others).

## Why it is harmful
Skipping an overflowed step is how fp16 loss scaling works, so this is not an error by
itself. It becomes one when the scaler never gives up: if every step overflows because
the model has diverged (not because the scale is too high), the scaler keeps halving the
scale and skipping steps, and the run "trains" for hours without an update. A static
loss scale that skips steps is worse still: nothing changes between the skipped steps.

## Example
```python
import torch
def step(self):
    self.overflow = self.has_overflow(self.fp16_groups)
    self.update_scale(self.overflow)
    if self.overflow:
        return self.overflow
    self.optimizer.step()
```

## Use instead
A safe scaler halts the run after N consecutive skipped steps (say 10-20), or as soon as
the scale reaches its minimum, with the documented error (`nozero.check_finite`) naming
the step. Training in bf16 needs no loss scaling at all: its range equals fp32's.
""",
    ),
    RuleEntry(
        code="NZ407",
        name="ctc-zero-infinity",
        message="CTCLoss(zero_infinity=True) turns infinite losses and their gradients into zeros",
        default=False,
        doc="""\
## What it flags
Off by default. `torch.nn.CTCLoss(zero_infinity=True)` and
`F.ctc_loss(..., zero_infinity=True)`, and the same switch as a configuration default
(`zero_infinity: bool = field(default=True)`).

## Why it is harmful
An infinite CTC loss means that an alignment is impossible (the target is longer than
the input allows): the switch zeroes it and its gradient, so bad records train as
silent no-ops. This is common and often intended, which is why the rule is opt-in.

## Example
```python
import torch
criterion = torch.nn.CTCLoss(blank=0, zero_infinity=True)
```

## Use instead
Filter impossible alignments where the data is loaded (input length ≥ target length
plus repeats), count them, and keep `zero_infinity=False`, so a real divergence raises.
```python
import torch

criterion = torch.nn.CTCLoss(blank=0, zero_infinity=False)
```
""",
    ),
    RuleEntry(
        code="NZ408",
        name="fp16-overflow-clamp",
        message="non-finite activations are clamped into the finite range and training goes on",
        default=False,
        doc="""\
## What it flags
Off by default. A forward pass that tests activations for Inf/NaN and clamps them into
the floating-point range (`torch.clamp(h, -finfo.max + 1000, finfo.max - 1000)` under
`if torch.isinf(h).any()`), the usual fp16 overflow workaround of encoder layers.

## Why it is harmful
An activation that overflows fp16 says the layer's scale is off; clamping it keeps the
forward pass finite, but the model trains on saturated values and NaN passes through
untouched, so the failure shows up later and elsewhere.

## Example
```python
import torch
def forward(self, hidden_states):
    if not torch.isfinite(hidden_states).all():
        clamp_value = torch.finfo(hidden_states.dtype).max - 1000
        hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
    return hidden_states
```

## Use instead
Train in bf16 (its range equals fp32's), or find the layer that overflows; keep a
check that raises on the first non-finite loss.
""",
    ),
    RuleEntry(
        code="NZ409",
        name="numpyro-stable-update",
        message="numpyro's SVI.stable_update keeps the old state when the loss is not finite",
        default=True,
        doc="""\
## What it flags
`svi.stable_update(state, ...)` and `svi.run(..., stable_update=True)` in a file that
imports numpyro.

## Why it is harmful
When the loss or the new state holds a NaN or an Inf, `stable_update` hands back the
previous state and a loss as if the step had happened. The run goes on from the same
point with the same data, so a model that has gone bad keeps repeating the failed step
and the loss curve shows nothing wrong.

## Example
```python
from numpyro.infer import SVI, Trace_ELBO

svi = SVI(model, guide, optax.adam(1e-3), loss=Trace_ELBO())
for step in range(num_steps):
    state, loss = svi.stable_update(state, data)
```

## Use instead
`svi.update`, then check the loss and raise on the step that went bad:

```python
state, loss = svi.update(state, data)
if not jnp.isfinite(loss):
    raise RuntimeError(f"non-finite loss at step {step}")
```

## References
- numpyro, `SVI.stable_update` and `SVI.run(stable_update=...)`:
  https://num.pyro.ai/en/stable/svi.html
""",
    ),
    RuleEntry(
        code="NZ410",
        name="keep-old-state-on-non-finite",
        message="the update is dropped (old state kept) when it is non-finite, and nothing raises",
        default=True,
        doc="""\
## What it flags
A choice between the new and the old parameters, optimizer state or updates, made on a
finiteness fact about the loss or gradients. The choice may be `lax.cond`, `lax.select`,
`where` or `tf.cond`. It may be a tree map of any of them (a lambda, or
`functools.partial(jnp.where, ok)`). It may be a conditional expression (`new if ok else
old`).

The fact may be a loss below a limit (`where(loss < max_loss, new, old)`), which NaN
fails. A select on a norm below its limit is a clip by hand and is left alone.

It is not flagged when the function keeps the failure for a raise or raises on it.
Keeping means returning the flag, storing it, or passing it on to anything but a log.
An unrelated `assert` or `raise` elsewhere in the function does not count. Neither does
a flag stored only in a record for the logs (`stats["step_rejected"] = ok`, `metrics =
dict(skipped=...)`).

## Why it is harmful
It is the device-side form of "skip the step": the bad step leaves no trace, and if every
step is bad the run keeps the initial parameters forever while reporting progress.

## Example
```python
ok = jnp.isfinite(loss) & jnp.isfinite(optax.global_norm(grads))
params = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)
```

## Use instead
Keep the guard if it protects a checkpoint, but record the failure and raise on the host:
return `ok` (or the first bad step) with the new state and raise the documented error
when it is false.
""",
    ),
)
