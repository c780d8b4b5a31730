"""NZ5xx rules' metadata: checks that run too rarely to name the exact step."""

from __future__ import annotations

from nozero.lint.catalog.entry import RuleEntry

ENTRIES: tuple[RuleEntry, ...] = (
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
