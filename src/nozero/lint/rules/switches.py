"""NZ4xx: library switches and device-side guards that skip or zero a non-finite step."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from nozero.lint import vocab
from nozero.lint.rules.base import Context, Rule
from nozero.lint.rules.replace import is_constant

_FALSE = m.Name("False") | m.Integer("0")
_TRUE = m.Name("True") | m.Integer("1")


def _is_reference(node: cst.Name | cst.Attribute, ctx: Context) -> bool:
    """A name used as a value: not an import, a keyword, a definition or an attribute."""
    parent = ctx.ancestors[-1] if ctx.ancestors else None
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return False
    if isinstance(parent, cst.FunctionDef | cst.ClassDef | cst.ImportAlias | cst.Param):
        return False
    return not any(isinstance(a, cst.Import | cst.ImportFrom) for a in ctx.ancestors)


class _OptaxSwitch(Rule):
    """One optax transform that skips or zeroes non-finite updates."""

    switch: str

    node_types = (cst.Name, cst.Attribute)

    def check(self, node: cst.CSTNode, ctx: Context) -> None:
        assert isinstance(node, cst.Name | cst.Attribute)
        last = node.attr.value if isinstance(node, cst.Attribute) else node.value
        if last != self.switch and last not in ctx.facts.aliases:
            return  # cheap test first: this runs on every name in the code
        qualified = ctx.qualified(node) or ""
        if qualified.startswith("optax.") and qualified.endswith("." + self.switch):
            if _is_reference(node, ctx):
                ctx.report(node, self)


class OptaxApplyIfFinite(_OptaxSwitch):
    code = "NZ401"
    name = "optax-apply-if-finite"
    switch = "apply_if_finite"
    message = "optax.apply_if_finite skips non-finite updates and keeps training"
    doc = """\
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
"""
    VALID = [
        "import optax\ntx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))\n",
        "# optax.apply_if_finite would hide NaNs\nnote = 'apply_if_finite'\n",
    ]
    INVALID = [
        "import optax\ntx = optax.apply_if_finite(optax.adam(1e-3), 3)\n",
        "import optax as ox\ntx = ox.apply_if_finite(ox.sgd(0.1), max_consecutive_errors=2)\n",
        "from optax import apply_if_finite as guard\ntx = guard(base, 5)\n",
    ]


class OptaxZeroNans(_OptaxSwitch):
    code = "NZ402"
    name = "optax-zero-nans"
    switch = "zero_nans"
    message = "optax.zero_nans replaces NaN updates with zeros"
    doc = """\
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
"""
    VALID = ["import optax\ntx = optax.chain(optax.clip(1.0), optax.adam(1e-3))\n"]
    INVALID = [
        "import optax\ntx = optax.chain(optax.zero_nans(), optax.adam(1e-3))\n",
        "from optax import zero_nans\nparts = [zero_nans(), tx]\n",
    ]


class OptaxSkipNotFinite(_OptaxSwitch):
    code = "NZ403"
    name = "optax-skip-not-finite"
    switch = "skip_not_finite"
    message = "optax.skip_not_finite skips accumulated steps with non-finite gradients"
    doc = """\
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
"""
    VALID = ["import optax\ntx = optax.MultiSteps(opt, every_k_schedule=4)\n"]
    INVALID = [
        "import optax\n"
        "tx = optax.MultiSteps(opt, every_k_schedule=4,\n"
        "                      should_skip_update_fn=optax.skip_not_finite)\n",
    ]


class _SwitchOff(Rule):
    """A keyword argument, config key or attribute set to a value that hides non-finite
    values: ``clip_grad_norm_(..., error_if_nonfinite=False)``, ``{"key": value}``."""

    keyword: str
    bad_value: m.BaseMatcherNode

    node_types = (cst.Arg, cst.DictElement, cst.Assign)

    def check(self, node: cst.CSTNode, ctx: Context) -> None:
        if isinstance(node, cst.Arg):
            hit = node.keyword is not None and node.keyword.value == self.keyword
        elif isinstance(node, cst.DictElement):
            hit = isinstance(node.key, cst.SimpleString) and (
                node.key.evaluated_value == self.keyword
            )
        else:
            assert isinstance(node, cst.Assign)
            hit = any(
                m.matches(t.target, m.Attribute(attr=m.Name(self.keyword)))
                for t in node.targets
            )
        if hit and m.matches(node.value, self.bad_value):
            ctx.report(node, self)


class ClipGradNormNonFiniteOff(_SwitchOff):
    code = "NZ404"
    name = "error-if-nonfinite-false"
    keyword = vocab.NONFINITE_KEYWORD
    bad_value = _FALSE
    message = "error_if_nonfinite=False lets gradient clipping go on with a non-finite norm"
    doc = """\
## What it flags
`torch.nn.utils.clip_grad_norm_(..., error_if_nonfinite=False)`, and the same setting in
a configuration dict (`{"error_if_nonfinite": False}`, `dict(error_if_nonfinite=False)`)
or on a config object.

## Why it is harmful
With a NaN or Inf total norm, clipping multiplies every gradient by a non-finite factor
and the optimizer steps on it; the setting says "do not tell me".

## Example
```python
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=False)
```

## Use instead
`error_if_nonfinite=True`, which raises a `RuntimeError` naming the non-finite norm.
"""
    VALID = [
        "import torch\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, "
        "error_if_nonfinite=True)\n",
        "config = {'error_if_nonfinite': True}\n",
    ]
    INVALID = [
        "import torch\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, "
        "error_if_nonfinite=False)\n",
        "clip = {'max_norm': 1.0, 'error_if_nonfinite': False}\n",
        "cfg.error_if_nonfinite = False\n",
    ]


class LoggingNanInfFilter(_SwitchOff):
    code = "NZ405"
    name = "logging-nan-inf-filter"
    keyword = vocab.NAN_FILTER_KEYWORD
    bad_value = _TRUE
    message = "logging_nan_inf_filter=True hides non-finite losses from the training log"
    doc = """\
## What it flags
Hugging Face `TrainingArguments(logging_nan_inf_filter=True)` set explicitly (also as a
config key or attribute).

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
"""
    VALID = ["args = TrainingArguments(output_dir='out', logging_nan_inf_filter=False)\n"]
    INVALID = [
        "args = TrainingArguments(output_dir='out', logging_nan_inf_filter=True)\n",
        "cfg = {'logging_nan_inf_filter': True}\n",
    ]


class KeepOldOnNonFinite(Rule):
    code = "NZ410"
    name = "keep-old-state-on-non-finite"
    message = "the update is dropped (old state kept) when it is non-finite, and nothing raises"
    doc = """\
## What it flags
`lax.cond`, `lax.select`, `where` or a conditional expression (`new if ok else old`)
that chooses between the new and the old parameters,
optimizer state or updates on a finiteness test of the loss or gradients — unless the
same function raises, or keeps the failure (returns it, stores it, passes it to a
callback) so that a caller can raise.

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
"""
    VALID = [
        "import jax, jax.numpy as jnp\n"
        "def step(params, new_params, loss):\n"
        "    ok = jnp.isfinite(loss)\n"
        "    params = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)\n"
        "    return params, ok\n",
        "import jax.numpy as jnp\nlogits = jnp.where(mask, logits, other_logits)\n",
    ]
    INVALID = [
        "import jax, jax.numpy as jnp\n"
        "def step(params, new_params, loss):\n"
        "    ok = jnp.isfinite(loss)\n"
        "    return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_params, params)\n",
        "from jax import lax\nimport jax.numpy as jnp\n"
        "def step(state, grads):\n"
        "    return lax.cond(jnp.all(jnp.isfinite(grads)), apply, lambda s, g: s, state, grads)\n",
        "import math\nfor batch in loader:\n    new_params, loss = update(params, batch)\n"
        "    params = new_params if math.isfinite(loss) else params\n",
    ]
    node_types = (cst.Call, cst.IfExp)

    def check(self, node: cst.CSTNode, ctx: Context) -> None:
        if isinstance(node, cst.IfExp):  # ``new if isfinite(loss) else old``
            branches = [node.body, node.orelse]
            if not any(is_constant(b, ctx) for b in branches) and (
                ctx.is_nonfinite_test(node.test) and not ctx.scope_is_guarded()
            ):
                ctx.report(node, self)
            return
        assert isinstance(node, cst.Call)
        called = ctx.called(node)
        if called not in vocab.SELECTORS or len(node.args) < 3:
            return
        branches = [a.value for a in node.args[1:3]]
        if called in ("where", "select") and any(is_constant(b, ctx) for b in branches):
            return  # a constant fill is NZ103's concern
        if ctx.is_nonfinite_test(node.args[0].value) and not ctx.scope_is_guarded():
            ctx.report(node, self)


RULES: list[type[Rule]] = [
    OptaxApplyIfFinite, OptaxZeroNans, OptaxSkipNotFinite, ClipGradNormNonFiniteOff,
    LoggingNanInfFilter, KeepOldOnNonFinite,
]
