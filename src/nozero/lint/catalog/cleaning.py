"""NZ1xx rules' metadata: non-finite values replaced or dropped from training signal."""

from __future__ import annotations

from nozero.lint.catalog.entry import RuleEntry

ENTRIES: tuple[RuleEntry, ...] = (
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
        message="a select on a non-finite test replaces training signal",
        default=True,
        doc="""\
## What it flags
`where(isnan(x), constant, x)` and its variants (`isinf`, `~isfinite`, `x != x`,
`tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)`) on training signal, where one branch
is a constant, zeros or ones; and the conditional expression
`loss if math.isfinite(loss) else 0.0`. The message says which of the two it found.

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
`g.at[jnp.isnan(g)].set(0)`. A mask true only where values are finite
(`x[isfinite(p)] = f(...)`, a sampler's `accept & finite_prior`) writes the finite
entries and leaves the non-finite ones as they were: not flagged.

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
Keras `Layer`). There a value the model computed itself may be put back to zeros or ones
when any element is not finite: `if torch.isnan(vel).any(): vel = torch.zeros_like(vel)`.
What the model outputs then goes on as if the model had made it. Values the model was
given are input cleaning and are left alone. So is a matrix put back to the identity
(`torch.eye(n)`) when a solve comes out NaN. That is a solver's fallback, and its NaN
inputs still reach the loss.

A loss clamped below an upper bound before the step counts without any test
(`loss = torch.clamp(loss, max=1e4)`, `loss.clamp(0, 100)`, `tf.clip_by_value(loss, 0,
1e4)`): an infinite loss trains on the bound. A clamp from below only, or of another
value (probabilities before a log), is left alone.

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
        message="non-finite per-sample losses or loss terms are dropped from the loss",
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
)
