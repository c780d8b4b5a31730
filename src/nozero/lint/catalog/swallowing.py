"""NZ3xx rules' metadata: an error about a non-finite value caught and passed over."""

from __future__ import annotations

from nozero.lint.catalog.entry import RuleEntry

ENTRIES: tuple[RuleEntry, ...] = (
    RuleEntry(
        code="NZ301",
        name="swallowed-floating-point-error",
        message="the non-finite failure is caught and training goes on",
        default=True,
        doc="""\
## What it flags
`except FloatingPointError` / `ArithmeticError` around code that
touches loss or gradients, and `except NonFiniteError` anywhere, whose handler does not
raise again. A project's own exception class named for a non-finite value counts too,
wherever it is defined. One that names the value (`LossIsNaNError`) counts anywhere. A
plain one (`NanException`) counts around training signal or a call that runs training
(`trainer.fit()`), not around a data loader's `parse(row)`.

It also flags a retry helper told to catch such a failure and run training again. Each
retry is training going on past the non-finite value:
`retry_call(model.train, exceptions=NanException)`, tenacity's
`retry_if_exception_type(FloatingPointError)` on a `train_step`, `backoff.on_exception`.

It also flags a handler that catches the failure its own `try` raises on a non-finite
value: a `raise` under a finiteness test, a finiteness `assert`, `detect_anomaly()`,
`check_finite`, or `clip_grad_norm_(..., error_if_nonfinite=True)`. Inside a loop the
handler goes on to the next batch. In a step function, a broad `except` (`Exception`,
`RuntimeError`) may hand back a made-up result (`return 0.0`, `return None`): training
goes on as if the step had run.

In a training loop, it also flags a bare `except`, `except Exception` or `except
RuntimeError` around a step (`backward()`, `optimizer.step()`) whose handler raises on no
path and goes on to the next batch. The non-finite checks of torch and nozero raise
`RuntimeError`, so such a handler swallows them with every other error. A handler that
raises what it does not recognise (`if "out of memory" in str(err): ... else: raise`) is
left alone.

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
)
