"""NZ2xx: skipping the step, or going on, when the loss or a gradient is non-finite."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from nozero.lint import vocab
from nozero.lint.rules.base import Context, Rule, raises, walk

_SKIPS = (cst.Continue, cst.Break, cst.Pass, cst.Return)
_BOOLEAN_RETURN = m.Return(value=m.Name("True") | m.Name("False"))


def _branches(node: cst.If) -> list[cst.CSTNode]:
    return [node.body] + ([node.orelse] if node.orelse is not None else [])


def _is_predicate_body(node: cst.If) -> bool:
    """``if isnan(x): return True`` is a test helper: its caller decides."""
    statements = [
        small
        for branch in _branches(node)
        for small in walk(branch)
        if isinstance(small, cst.BaseSmallStatement)
    ]
    return bool(statements) and all(m.matches(s, _BOOLEAN_RETURN) for s in statements)


def _names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def _skip_kind(node: cst.If, ctx: Context) -> str | None:
    """What the non-raising check does: 'skip' (continue, return, zero_grad...), 'go on'
    (training continues past it), or None when it hands the values it tested back to its
    caller (``return step, loss``: a search, not a skip)."""
    tested = _names(node.test)
    for branch in _branches(node):
        for child in walk(branch):
            if isinstance(child, cst.Return) and child.value is not None and (
                _names(child.value) & tested
            ):
                return None
            if isinstance(child, _SKIPS):
                return "skip"
            if isinstance(child, cst.Call) and ctx.called(child) == "zero_grad":
                return "skip"
    return "go on" if _trains_on(node, ctx) else None


def _trains_on(node: cst.If, ctx: Context) -> bool:
    """Is the check in a training loop, or does it guard an optimizer step? (Elsewhere,
    say a report about a finished run, a check that does not raise stops nothing.)"""
    if ctx.in_loop():
        return True
    return any(
        isinstance(child, cst.Call) and ctx.called(child) in vocab.UPDATE_CALLS
        for branch in _branches(node)
        for child in walk(branch)
    )


def _unguarded_check(node: cst.CSTNode, ctx: Context) -> str | None:
    """For an ``if`` that tests training signal for NaN/Inf and never raises: its kind."""
    if not isinstance(node, cst.If) or not ctx.is_nonfinite_test(node.test):
        return None
    if raises(node, ctx) or _is_predicate_body(node):
        return None
    return _skip_kind(node, ctx)


class SkipStepOnNonFinite(Rule):
    code = "NZ201"
    name = "skip-step-on-non-finite"
    message = "a non-finite loss/gradient check skips the step instead of raising"
    doc = """\
## What it flags
An `if` that tests loss or gradients for NaN/Inf (`isnan`, `isinf`, `isfinite`,
`math.isnan`, `x != x`, a same-file helper that does) and whose branch skips: `continue`,
`break`, `pass`, `return` (of the old state or `None`), `optimizer.zero_grad()` — without
raising.

## Why it is harmful
Skipping hides the bad step: the data or the bug that produced it is never looked at, and
if it happens on every step the run "trains" for hours without learning anything.

## Example
```python
if torch.isnan(loss):
    optimizer.zero_grad()
    continue
```

## Use instead
```python
if not math.isfinite(loss.item()):
    raise NonFiniteError(step, loss.item(), grad_norm)
```
(or `nozero.check_finite(loss=..., grad_norm=..., step=...)`).
"""
    VALID = [
        "import math\nif math.isnan(loss):\n    raise FloatingPointError('nan loss')\n",
        "import numpy as np\nfor row in rows:\n    if np.isnan(row).any():\n        continue\n",
        "import math\ndef bad(loss):\n    if math.isnan(loss):\n        return True\n"
        "    return False\n",
        "import math\nfrom nozero import check_finite\nif math.isnan(loss):\n"
        "    check_finite(loss=loss, grad_norm=gn, step=step)\n",
        "import math\ndef first_bad(history):\n    for step, (loss, gn) in enumerate(history):\n"
        "        if not math.isfinite(loss):\n            return step, loss\n",
    ]
    INVALID = [
        "import torch\nfor batch in loader:\n    loss = model(batch)\n"
        "    if torch.isnan(loss):\n        optimizer.zero_grad()\n        continue\n",
        "import jax.numpy as jnp\ndef step(state, grads):\n"
        "    if not jnp.isfinite(grads).all():\n        return state\n    return apply(state)\n",
        "for batch in loader:\n    loss = compute(batch)\n    if loss != loss:\n        pass\n",
        "import math\ndef is_bad(x):\n    return math.isnan(x) or math.isinf(x)\n"
        "for b in data:\n    loss = train(b)\n    if is_bad(loss):\n        continue\n",
    ]
    node_types = (cst.If,)

    def check(self, node: cst.CSTNode, ctx: Context) -> None:
        if _unguarded_check(node, ctx) == "skip":
            ctx.report(node, self)


class ContinuesPastNonFinite(Rule):
    code = "NZ202"
    name = "continue-past-non-finite"
    message = "a non-finite loss/gradient check does not stop training"
    doc = """\
## What it flags
An `if` in a training loop (or guarding an optimizer step) that tests loss or gradients
for NaN/Inf but neither raises nor stops: it only logs or counts, or it guards the update
(`if isfinite(loss): optimizer.step()`), so the loop goes on with the next batch.

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
"""
    VALID = [
        "import math\nif not math.isfinite(loss):\n"
        "    logger.error('nan')\n    raise SystemExit(1)\n",
        "import math\nif math.isfinite(score):\n    best = max(best, score)\n",
        "import math\ndef describe(loss):\n    notes = []\n    if not math.isfinite(loss):\n"
        "        notes.append('the loss was not finite')\n    return notes\n",
    ]
    INVALID = [
        "import math\nwhile True:\n    loss = step()\n    if not math.isfinite(loss):\n"
        "        logger.warning('non-finite loss')\n",
        "import torch\nif torch.isfinite(loss):\n    optimizer.step()\n",
        "import math\nfor batch in loader:\n    loss = train_step(batch)\n"
        "    if math.isnan(loss):\n        log.warning('nan loss')\n",
    ]
    node_types = (cst.If,)

    def check(self, node: cst.CSTNode, ctx: Context) -> None:
        if _unguarded_check(node, ctx) == "go on":
            ctx.report(node, self)


RULES: list[type[Rule]] = [SkipStepOnNonFinite, ContinuesPastNonFinite]
