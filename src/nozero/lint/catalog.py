"""Every rule's metadata, without libcst: code, name, message, page text, default.

The command line lists, selects and documents rules from here without importing the
rules themselves (which need libcst); each rule class reads its metadata from here by
its code, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleEntry:
    """One rule as users see it: ``default`` says whether it runs without ``--select``."""

    code: str
    name: str
    message: str
    default: bool
    doc: str

    @property
    def default_enabled(self) -> bool:
        return self.default


ENTRIES: tuple[RuleEntry, ...] = (
    RuleEntry(
        code="NZ001",
        name="syntax-error",
        message="syntax error",
        default=True,
        doc="""\
## What it flags
A file that holds trigger text and does not parse. Trigger text is a word one of the
other rules looks for, such as `nan_to_num`, `isfinite` or `apply_if_finite`. The
finding carries the parser's message and position.

A file without trigger text is not nozero's to parse: Python itself and general linters
(ruff, flake8) check its syntax. Nor is a test module (`test_*.py`, `*_test.py`,
`conftest.py`): a test exercises training code rather than training, so nothing in one
is reported.

Valid syntax newer than the running Python is never reported. When the standard
library's parser rejects a file, libcst's grammar has the last word (Python up to 3.13:
PEP 695 `type` aliases and generics, PEP 701 f-strings). Such a file is accepted, but
the other rules do not check its code on that Python.

## Why it is harmful
Nothing in the file can be checked, so a zero-and-continue pattern in it would go
unnoticed.

## Example
```python
def step(grads:
    return jnp.nan_to_num(grads)
```

## Use instead
Fix the syntax error.
""",
    ),
    RuleEntry(
        code="NZ002",
        name="noqa-without-reason",
        message="noqa without a reason: write why after the code (# noqa: NZ101 padded rows)",
        default=True,
        doc="""\
## What it flags
With `--require-reason`, a `# noqa` comment that suppresses a finding but gives no text
after its codes. Such a comment does not suppress the finding.

## Why it is harmful
A suppression of a zero-and-continue finding is an exception to the project's rule. The
next reader needs to know why it is safe.

## Example
```python
import jax.numpy as jnp

grads = jnp.nan_to_num(grads)  # noqa: NZ101
```

## Use instead
Say why this site is safe, in words that fit the code suppressed:
```python
import jax.numpy as jnp

grads = jnp.nan_to_num(grads)  # noqa: NZ101 padded rows carry no gradient
```
""",
    ),
    RuleEntry(
        code="NZ003",
        name="unused-noqa",
        message="noqa names a code that is unknown or suppresses nothing",
        default=True,
        doc="""\
## What it flags
A `# noqa: NZ...` comment that names a code no nozero rule has (`NZ999`, a typo of
`NZ101`). Also one whose nozero codes suppress nothing on that line: no enabled rule
reports anything there. Codes of other tools (`E501`, `F401`) and a bare `# noqa` are
left alone. Test modules get only the unknown-code check, since no rule runs in them.

## Why it is harmful
A comment with a mistyped code suppresses nothing, yet reads as if it did. A comment
that suppresses nothing is stale: the code it excused was fixed or moved. Left in place,
it will silently excuse the next zero-and-continue written on that line.

## Example
```python
import jax.numpy as jnp

grads = jnp.nan_to_num(grads)  # noqa: NZ999 padded rows carry no gradient
```

## Use instead
Name the code the line is flagged with, or delete the comment:
```python
import jax.numpy as jnp

grads = jnp.nan_to_num(grads)  # noqa: NZ101 padded rows carry no gradient
```
""",
    ),
    RuleEntry(
        code="NZ101",
        name="nan-to-num-on-signal",
        message="nan_to_num on training signal hides a non-finite value instead of stopping",
        default=True,
        doc="""\
## What it flags
`nan_to_num` applied to loss, gradients, updates, parameters or optimizer state. That
covers numpy, jax.numpy and torch, `torch.nan_to_num_`, the `.nan_to_num_()` tensor
method and the `out=` form. It also covers a helper function in the same file that calls
it. A helper from another module counts when its name says it cleans non-finite values
(`replace_nan(grad, 0)`, `nan_to_zero`, `clean_infs`). Names such as `divide_no_nan`,
`inf_to_nan`, or one that tests, counts or raises do not.

A model's outputs count too when the loss is computed from them in the same function
(`logits = torch.nan_to_num(self.head(x))`, then `cross_entropy(logits, labels)`). The
NaN the model produced is then hidden from the loss. Inputs and labels cleaned before
the model are input cleaning and are left alone.

So are 0/0 guards, here and in the other replacing rules (NZ102 to NZ105). One is a
replacement that runs only when there is nothing to average (`if mask.numel() == 0:`).
Another clears a value just multiplied by a mask (`loss = loss * mask`): there the NaN
of a masked-out zero target is `0 * inf`.

## Why it is harmful
A NaN or Inf in the loss or a gradient means the run has already gone wrong: a bad batch,
an overflow, a bug. Replacing it with zero (or a large finite number) lets training go
on with corrupted statistics and hides the step where it happened.

## Example
```python
grads = jax.grad(loss_fn)(params, batch)
grads = jnp.nan_to_num(grads, nan=0.0, posinf=0.0, neginf=0.0)
```

## Use instead
Check and stop: `check_finite` raises the documented error. Clean *input data* where it
is loaded instead.
```python
import jax
import optax

from nozero import check_finite

loss, grads = jax.value_and_grad(loss_fn)(params, batch)
check_finite(step, loss, optax.global_norm(grads))
```
""",
    ),
    RuleEntry(
        code="NZ102",
        name="nan-to-num-mapped-over-signal",
        message="nan_to_num mapped over gradients or registered as a gradient hook",
        default=True,
        doc="""\
## What it flags
`nan_to_num` passed as a function value over training signal. It may be mapped over a
tree (`jax.tree.map`, `jax.tree_util.tree_map`, `tf.nest.map_structure`, `map`). It may be
registered as a gradient hook (`tensor.register_hook`, module backward hooks). The same
holds for `functools.partial(nan_to_num, ...)`, a lambda that calls it, and a hook from
another module named for cleaning non-finite values (`p.register_hook(nan_to_zero_hook)`).

## Why it is harmful
A hook or a tree map runs on every gradient of every step: a NaN anywhere is silently
turned into zero and the run continues on corrupted updates.

## Example
```python
for p in model.parameters():
    p.register_hook(torch.nan_to_num)
```

## Use instead
Let the non-finite value through and check it once per step, raising the documented
error (`nozero.check_finite`).
""",
    ),
    RuleEntry(
        code="NZ103",
        name="where-substitutes-non-finite",
        message="where(isnan/isinf/isfinite(...)) replaces non-finite training signal",
        default=True,
        doc="""\
## What it flags
`where(isnan(x), constant, x)` and its variants (`isinf`, `~isfinite`, `x != x`,
`tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)`) on training signal, where one branch
is a constant, zeros or ones; and the conditional expression
`loss if math.isfinite(loss) else 0.0`.

## Why it is harmful
It is `nan_to_num` written by hand: the NaN disappears, the optimizer steps on made-up
values, and nothing records that the step was bad.

## Example
```python
grads = jnp.where(jnp.isnan(grads), 0.0, grads)
```

## Use instead
Raise on the first non-finite step (`nozero.check_finite`). A `where` over a padding mask
or over input features is fine and not flagged.
""",
    ),
    RuleEntry(
        code="NZ104",
        name="masked-fill-non-finite",
        message="masked_fill over a non-finite mask replaces training signal",
        default=True,
        doc="""\
## What it flags
`x.masked_fill(isnan(x), 0)`, `masked_fill_` and `torch.masked_fill(x, isnan(x), 0)` where
the mask tests training signal for NaN or Inf.

## Why it is harmful
It zeroes exactly the values that say the step went wrong, and training goes on.

## Example
```python
grad = grad.masked_fill(torch.isnan(grad), 0.0)
```

## Use instead
Raise on the first non-finite step. `masked_fill` with a padding or attention mask is
fine and not flagged.
""",
    ),
    RuleEntry(
        code="NZ105",
        name="masked-assignment-of-non-finite",
        message="assignment through a non-finite mask overwrites training signal",
        default=True,
        doc="""\
## What it flags
Overwriting the non-finite entries of training signal through an index mask:
`g[isnan(g)] = 0`, `g[g != g] = 0`, `p.grad[~torch.isfinite(p.grad)] = 0`, and JAX's
`g.at[jnp.isnan(g)].set(0)`.

## Why it is harmful
It is `nan_to_num` by hand: the evidence of a bad step is erased and the run goes on.

## Example
```python
grads[grads != grads] = 0
```

## Use instead
Raise on the first non-finite step. Dropping or filling non-finite *input rows* while
loading data is fine and not flagged.
""",
    ),
    RuleEntry(
        code="NZ106",
        name="value-replaced-on-non-finite",
        message="a non-finite loss/gradient is replaced by another value and training goes on",
        default=True,
        doc="""\
## What it flags
An `if` on a finiteness test of the loss or gradients whose branch gives the tested
value something else: a constant, a running average, the previous value. The same
holds for the running loss the value feeds. The finding is reported at the assignment
and names the test.

Model state counts too, in a method of a model class (`nn.Module`, `eqx.Module`, a
Keras `Layer`). There a value the model computed itself may be put back to zeros, ones or
the identity when any element is not finite: `if torch.isnan(self.K).any(): self.K =
torch.eye(n)`. What the model outputs then goes on as if the model had made it. Values
the model was given are input cleaning and are left alone.

## Why it is harmful
The bad step disappears from the numbers that were supposed to show it: the logged loss
looks healthy, the optimizer steps on invented values, and nothing records where the
first non-finite value came from.

## Example
```python
import torch
for batch in loader:
    loss = model(batch)
    if torch.isnan(loss) or torch.isinf(loss):
        loss = running_loss / max(steps, 1)
    running_loss += loss
```

## Use instead
Raise on the first non-finite step (`nozero.check_finite`). A metric or an evaluation
score may be replaced as you like; it is not flagged.
""",
    ),
    RuleEntry(
        code="NZ107",
        name="non-finite-samples-dropped",
        message="non-finite per-sample losses are dropped before the mean",
        default=True,
        doc="""\
## What it flags
Non-finite terms left out of the loss, in code that trains or hands the losses back to
it. Three shapes are flagged:

- per-sample losses indexed by a finiteness mask before they are reduced:
  `losses[torch.isfinite(losses)].mean()`, `loss = loss[~loss.isnan()]`, or a mask kept
  in a variable first;
- only the finite terms gathered into a sum: `if not torch.isnan(loss):
  losses.append(loss)`;
- a mean or sum that skips NaN (`losses.nanmean()`, `jnp.nanmean(loss)` in a loss
  function, `torch.nansum`). It drops the terms with no test at all.

NumPy's own `nanmean` computes no gradient and is left alone. So is an analysis that
keeps the finite points to itself (a learning-rate finder's suggestion). So is a running
average for the logs (`avg += float(loss) / n`).

## Why it is harmful
A sample that produces NaN or Inf is a bug or a bad record; dropping it from the mean
lets training go on as if it were not there, and if most samples go bad the run keeps
"learning" from the few that remain.

## Example
```python
losses = criterion(logits, targets)
loss = losses[torch.isfinite(losses)].mean()
```

## Use instead
Raise on the first non-finite loss, and clean the offending records where the data is
loaded.
""",
    ),
    RuleEntry(
        code="NZ201",
        name="skip-step-on-non-finite",
        message="a non-finite loss/gradient check skips the step instead of raising",
        default=True,
        doc="""\
## What it flags
A step left when the loss or a gradient is non-finite. nozero follows the finiteness
fact from where it is established to where training reacts to it.

The fact is a test (`isnan`, `isinf`, `isfinite`, `x != x`, `x == inf`,
`tf.math.is_nan`). Or it is a flag holding one: `ok = ...`, `self.bad = ...`, a
same-file helper's tuple result, an `all_reduce`d or `.item()`ed flag, or `skip = True`
set where a test failed.

The reaction is one of these:

- `continue`, `break` or `pass`;
- a `return` of the old state, or of nothing;
- the optimizer step taken only when finite;
- the gradients zeroed (`zero_grad()`, `p.grad = None`, `zero_()`, `fill_(0)`, a `cond`
  whose other branch returns zeros);
- a mark named for skipping (`self.skip_next_update = True`) that another method or a
  framework's loop skips on.

One branch raising does not excuse another that goes on. The finding is at the
reaction. Its message names the route, e.g. `bad set at line 12 from isnan(loss); the
step is skipped here`.

## Why it is harmful
Skipping hides the bad step: the data or the bug that produced it is never looked at, and
if it happens on every step the run "trains" for hours without learning anything.

## Example
```python
import torch

for step, batch in enumerate(loader):
    loss = model(batch)
    if torch.isnan(loss):
        optimizer.zero_grad()
        continue
    loss.backward()
    optimizer.step()
```

## Use instead
Raise on the first non-finite loss or gradient norm:
```python
import torch

from nozero import check_finite

grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
check_finite(step, loss, grad_norm)
optimizer.step()
```
`check_finite` raises `nozero.NonFiniteError`, which carries the step and both values.
""",
    ),
    RuleEntry(
        code="NZ202",
        name="continue-past-non-finite",
        message="a non-finite loss/gradient check does not stop training",
        default=True,
        doc="""\
## What it flags
A finiteness test of the loss or gradients whose branch neither raises nor skips. It
sits in code that trains (a loop over batches, an optimizer step). It only logs or
counts, so the loop goes on with the next batch. Passing the flag to a log call records
nothing.

The same holds for a check moved into a helper (`self.check_loss(loss)`) whose answer
the training code drops before it steps. A warning lets the first non-finite steps
through. So does a count that raises only once a patience runs out.

## Why it is harmful
A warning in a log is not investigation: the run continues past the bad step, and the
first non-finite step, the one that matters, scrolls away.

## Example
```python
for step, batch in enumerate(loader):
    loss = train_step(batch)
    if not math.isfinite(loss):
        logger.warning("non-finite loss at %d", step)
```

## Use instead
Raise the documented error (`nozero.check_finite`) at the first non-finite step.
```python
from nozero import check_finite

for step, batch in enumerate(loader):
    loss, grad_norm = train_step(batch)
    check_finite(step, loss, grad_norm)
```
""",
    ),
    RuleEntry(
        code="NZ301",
        name="swallowed-floating-point-error",
        message="except clause catches the non-finite failure and training goes on",
        default=True,
        doc="""\
## What it flags
`except FloatingPointError` / `ArithmeticError` around code that
touches loss or gradients, and `except NonFiniteError` anywhere, whose handler does not
raise again.

## Why it is harmful
`np.errstate(all="raise")`, `torch.autograd.detect_anomaly()` or `nozero.check_finite`
turned the NaN into an exception precisely so that training stops; catching it and
moving on undoes that.

## Example
```python
for batch in loader:
    try:
        loss = train_step(batch)
    except FloatingPointError:
        continue
```

## Use instead
Let the exception propagate, or re-raise it after saving what helps the investigation:
```python
for batch in loader:
    try:
        loss = train_step(batch)
    except FloatingPointError:
        save_for_inspection(batch)
        raise
```
""",
    ),
    RuleEntry(
        code="NZ302",
        name="inspected-runtime-error",
        message="except clause inspects a non-finite error message and training goes on",
        default=True,
        doc="""\
## What it flags
`except RuntimeError` (or `Exception`, `BaseException`) whose handler looks for "nan",
"inf" or "non-finite" in the message and, in that branch, does not raise. The message
test is a string literal that starts with the word, as in `"nan" in str(err)`.

## Why it is harmful
Frameworks report non-finite values as `RuntimeError` (`detect_anomaly`,
`clip_grad_norm_(error_if_nonfinite=True)`, the documented nozero error). Matching the
message to carry on is a hand-written "skip the NaN step".

## Example
```python
for batch in loader:
    try:
        train_step(batch)
    except RuntimeError as err:
        if "nan" in str(err).lower():
            continue
        raise
```

## Use instead
Let the error propagate.
```python
for batch in loader:
    train_step(batch)
```
""",
    ),
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
(`dict(type="AmpOptimWrapper", loss_scale="dynamic", clip_grad=dict(...))`). Its scaler
expects an infinite norm on overflow and skips that step itself. That is dynamic loss
scaling, the opt-in NZ406's concern.

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
overflow). So is a non-finite gradient norm replaced by a marker (`-1`) that the
overflow check reads. An `except OverflowError` stays here too, since only a scaler
raises it, even when the scaler shows only on the fp16 side of an AMP switch.

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
    RuleEntry(
        code="NZ501",
        name="periodic-finite-check",
        message="finiteness check gated by step % N == 0 leaves N-1 of every N steps unchecked",
        default=False,
        doc="""\
## What it flags
A check of the loss or gradients for NaN/Inf that only runs when `step % N == 0`
(informational; off by default, enable with `select = ["NZ501"]`).

## Why it is harmful
The check does raise, but up to N-1 steps late: the step it reports is not the first bad
one, and the parameters have been updated with non-finite values in between.

## Example
```python
if step % 100 == 0:
    check_finite(step, loss, gn)
```

## Use instead
Check every step. On accelerators, compute the finiteness flag on the device every step
and read it back in batches: the first bad step is still exact.
```python
from nozero import check_finite

check_finite(step, loss, gn)
```
""",
    ),
)
CATALOG: dict[str, RuleEntry] = {entry.code: entry for entry in ENTRIES}
ALL_CODES: frozenset[str] = frozenset(CATALOG)
DEFAULT_CODES: frozenset[str] = frozenset(e.code for e in ENTRIES if e.default)


def entry(code: str) -> RuleEntry:
    """The metadata of rule ``code``; KeyError for an unknown code."""
    return CATALOG[code]
