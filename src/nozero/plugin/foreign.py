"""Non-finite checks of the field's libraries that raise their own error, and what to do.

A trainer that stops on a NaN with torch's or JAX's own error has the right instinct and
the wrong exception: the failure then says which library check fired and how to hand
its value to a check that raises the documented error at that step. One entry a check;
a new one is a table row and a test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ForeignCheck:
    """A library's own non-finite error: how its message reads, what it is, the fix."""

    pattern: re.Pattern[str]
    what: str
    fix: str


_HAND_OVER = (
    "nozero.torch.Guard's guard.step(loss, grad_norm=norm), or nozero.check_finite(step, "
    "loss, grad_norm), which raise the documented error at that step"
)
_DEBUG_AID = "a debugging aid, not a guard: leave it off in the runs that pytest --nozero makes"

FOREIGN_CHECKS: tuple[ForeignCheck, ...] = (
    ForeignCheck(
        re.compile(r"total norm of order \S+ for gradients .* is non-finite, so it cannot be"),
        "torch.nn.utils.clip_grad_norm_(..., error_if_nonfinite=True) refused a non-finite "
        "norm (Lightning Fabric's clip_gradients passes error_if_nonfinite=True by default)",
        f"pass error_if_nonfinite=False and hand the norm it returns to {_HAND_OVER}",
    ),
    ForeignCheck(
        re.compile(r"Function '\w+' returned (nan|inf) values in its \w+ output"),
        "torch.autograd's anomaly detection (torch.autograd.set_detect_anomaly or "
        "detect_anomaly, Lightning's Trainer(detect_anomaly=True)) raised in backward()",
        f"{_DEBUG_AID}; halt with {_HAND_OVER}",
    ),
    ForeignCheck(
        re.compile(r"Expected Tensor with single nonzero value, but got zero"),
        "torch._assert_async failed: a device-side assert on a finite flag, which carries "
        "no step, loss or grad norm (and on CUDA leaves the process unusable)",
        f"keep the flag on the device and let it halt through {_HAND_OVER}",
    ),
    ForeignCheck(
        re.compile(r"invalid value \((nan|inf)\) encountered in"),
        "JAX's jax_debug_nans / jax_debug_infs raised at the first operation that made a "
        "NaN or Inf",
        f"{_DEBUG_AID}; halt with nozero.jax.Guard or nozero.check_finite(step, loss, grad_norm)",
    ),
    ForeignCheck(
        re.compile(r"^(overflow|invalid value|divide by zero) encountered in \w+"),
        "numpy's floating-point errors are set to raise (np.seterr or np.errstate(all="
        "'raise')), so numpy raised where the value would have become non-finite",
        "let the value become non-finite and check the step's loss and grad norm with "
        "nozero.check_finite(step, loss, grad_norm)",
    ),
)


def foreign_check(error: BaseException) -> str | None:
    """Which library check raised ``error`` and the fix, or None for any other error."""
    text = str(error)
    for check in FOREIGN_CHECKS:
        if check.pattern.search(text):
            return f"this is a library's own non-finite check: {check.what}. Fix: {check.fix}"
    return None
