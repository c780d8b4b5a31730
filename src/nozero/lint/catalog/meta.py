"""NZ0xx rules' metadata: the linter about itself: syntax errors and noqa comments."""

from __future__ import annotations

from nozero.lint.catalog.entry import RuleEntry

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
)
