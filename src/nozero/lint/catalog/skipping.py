"""NZ2xx rules' metadata: a step or a batch skipped on a non-finite value."""

from __future__ import annotations

from nozero.lint.catalog.entry import RuleEntry

ENTRIES: tuple[RuleEntry, ...] = (
    RuleEntry(
        code="NZ201",
        name="skip-step-on-non-finite",
        message="a non-finite loss/gradient check skips the step instead of raising",
        default=True,
        doc="""\
## What it flags
A step left when the loss or a gradient is non-finite. nozero follows the finiteness
fact from where it is established to where training reacts to it.

The fact is a test (`isnan`, `isinf`, `isfinite`, `x != x`, `x.ne(x)`, `x == inf`,
`tf.math.is_nan`). Or it is a flag holding one: `ok = ...`, `self.bad = ...`, or a dict
entry (`stats["nonfinite"] = ...`). It may be a same-file helper's tuple result, an
`all_reduce`d or `.item()`ed flag, or `skip = True` set where a test failed.
A parameter called as a predicate counts when a call in the same file passes it a
finiteness test: `if reject(loss): continue`, with `train(..., reject=has_nan)`.

A comparison below a limit is a test too: `if loss < limit: <step> else: <skip>`. It
takes the step only for a finite loss. NaN fails every comparison, and an infinite loss
is above any finite limit. The finding is at the first statement of the `else`, where a
non-finite loss goes. Records of other steps (`best_loss`, `val_loss`) are not read this
way, nor is a branch that only logs beside a step taken either way.

The reaction is one of these:

- `continue`, `break` or `pass`;
- a `return` of the old state, or of nothing;
- the optimizer step taken only when finite;
- the gradients zeroed (`zero_grad()`, `p.grad = None`, `zero_()`, `fill_(0)`, a `cond`
  whose other branch returns zeros);
- a mark named for skipping (`self.skip_next_update = True`) that another method or a
  framework's loop skips on.
- in a decorator's wrapper, `return None` (or a constant) in place of the wrapped
  step's result: Lightning skips a step whose `training_step` returns None.

One branch raising does not excuse another that goes on. A flag named for ending
the run (`self.model.stop_training = True`, `trainer.should_stop = True`) is no skip:
the run ends, as it would on a raise. The finding is at the reaction. Its message
names the route, e.g. `bad set at line 12 from isnan(loss); the step is skipped here`.

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
does more than report: it counts the bad steps, appends them to a list, or restores a
value that training then ignores. It sits in code that trains (a loop over
batches, an optimizer step), so the loop goes on with the next batch.

A count that raises only once a patience runs out is the common case: the first
non-finite steps are trained through. A branch that only logs or prints is NZ203's, off
by default.

## Why it is harmful
The run continues past the bad step. When the patience finally runs out, the first
non-finite step, the one that matters, is many updates back.

## Example
```python
for step, batch in enumerate(loader):
    loss = train_step(batch)
    if not math.isfinite(loss):
        bad_steps += 1
        if bad_steps > patience:
            raise FloatingPointError("loss is not finite")
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
        code="NZ203",
        name="non-finite-check-only-logs",
        message="a non-finite loss/gradient check only logs; training goes on",
        default=False,
        doc="""\
## What it flags
A finiteness test of the loss or gradients in code that trains, whose branch only
reports: it logs, prints or warns, and the loop goes on with the next batch. Off by
default; enable it with `select = ["NZ203"]` (or `--select NZ203`).

The same holds for a check moved into a helper (`self.check_loss(loss)`) whose answer
the training code drops before it steps.

## Why it is harmful
A warning in a log is not investigation: the run continues past the bad step, and the
first non-finite step, the one that matters, scrolls away.

## Why it is off by default
Nothing is zeroed, skipped or hidden: the message is there to read. Teams use such
checks as diagnostics beside a run they watch, and readers of real training code (the
project's labelled samples) judge nearly all of them so. A team that wants every
non-finite value to stop the run turns this rule on.

## Example
```python
for step, batch in enumerate(loader):
    loss = train_step(batch)
    if not math.isfinite(loss):
        logger.warning("non-finite loss at %d", step)
```

## Use instead
Keep the message, and stop at the step it reports: log what helps the investigation,
then call `nozero.check_finite`, which raises the documented error.
```python
from nozero import check_finite

if not math.isfinite(loss):
    logger.warning("non-finite loss at %d: batch %s", step, batch_ids)
check_finite(step, loss, grad_norm)
```
""",
    ),
)
