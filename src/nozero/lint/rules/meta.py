"""NZ0xx: findings about the file itself rather than its code (applied by the engine)."""

from __future__ import annotations

from nozero.lint.rules.base import Rule


class SyntaxErrorRule(Rule):
    code = "NZ001"
    name = "syntax-error"
    message = "syntax error"
    doc = """\
## What it flags
A file that does not parse; the finding carries the parser's message and position.

## Why it is harmful
Nothing in the file can be checked, so a zero-and-continue pattern in it would go
unnoticed.

## Example
```python
def step(grads:
```

## Use instead
Fix the syntax error.
"""
    VALID = ["x = 1\n"]
    INVALID = ["def step(grads:\n    return grads\n"]


class NoqaWithoutReason(Rule):
    code = "NZ002"
    name = "noqa-without-reason"
    message = "noqa without a reason: write why after the code (# noqa: NZ101 fp16 scaling)"
    doc = """\
## What it flags
With `--require-reason`, a `# noqa` comment that suppresses a finding but gives no text
after its codes. Such a comment does not suppress the finding.

## Why it is harmful
A suppression of a zero-and-continue finding is an exception to the project's rule; the
next reader needs to know why it is safe.

## Example
```python
grads = jnp.nan_to_num(grads)  # noqa: NZ101
```

## Use instead
```python
grads = jnp.nan_to_num(grads)  # noqa: NZ101 padding rows carry no gradient
```
"""
    VALID = [
        "import jax.numpy as jnp\n"
        "grads = jnp.nan_to_num(grads)  # noqa: NZ101 padded rows have no gradient\n",
    ]
    INVALID = ["import jax.numpy as jnp\ngrads = jnp.nan_to_num(grads)  # noqa: NZ101\n"]


RULES: list[type[Rule]] = [SyntaxErrorRule, NoqaWithoutReason]
