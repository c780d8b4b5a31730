"""Other libraries' non-finite signals, turned into the documented error at a known step.

``checkify`` (``err.throw()``), equinox's ``eqx.error_if`` (under ``jax.jit`` or
``eqx.filter_jit``) and an exception raised inside a ``jax.debug.callback`` each
surface as their own exception type with their own text.
:func:`nonfinite_errors` turns any of them into :class:`nozero.NonFiniteError` for the
step the block ran, keeping the original as its ``__cause__``. Those signals carry no
loss or gradient norm: pass the values if the loop has them, else they read ``nan``
(a :class:`nozero.jax.Guard` given an ``unchecked`` step computes them itself).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator

import jax
from jax.experimental import checkify

from nozero.contract import NonFiniteError

# Under jax.jit, equinox's error_if and jax.debug.callback both fail through a host
# callback, which JAX reports as a JaxRuntimeError (or, raised while dispatching, a
# ValueError) quoting the callback's failure. Errors that quote none (out of memory, a
# bad shape) pass through. Under eqx.filter_jit, equinox raises its own error type.
_CALLBACK_MARKS = ("callback error", "equinoxruntimeerror")


def _is_equinox_runtime_error(err: BaseException) -> bool:
    """``eqx.error_if`` under ``eqx.filter_jit``: equinox re-raises its own exception type.

    Read from an equinox already imported (its error cannot exist otherwise), so
    converting never imports equinox.
    """
    equinox = sys.modules.get("equinox")
    error_type = getattr(equinox, "EquinoxRuntimeError", None)
    return isinstance(error_type, type) and isinstance(err, error_type)


def converts(err: BaseException) -> bool:
    """Whether ``err`` is a checkify, ``eqx.error_if`` or ``jax.debug.callback`` failure."""
    if isinstance(err, checkify.JaxRuntimeError) or _is_equinox_runtime_error(err):
        return True
    if not isinstance(err, jax.errors.JaxRuntimeError | ValueError):
        return False
    text = str(err).lower()
    return any(mark in text for mark in _CALLBACK_MARKS)


@contextlib.contextmanager
def nonfinite_errors(
    step: int, loss: float = math.nan, grad_norm: float = math.nan
) -> Iterator[None]:
    """Within the block, a converted failure is raised as the documented error at ``step``.

    ``with nonfinite_errors(step): err.throw()`` for checkify; around the call that runs
    (or blocks on) a step using ``eqx.error_if`` or a raising ``jax.debug.callback``.
    """
    try:
        yield
    except Exception as err:
        if not converts(err):
            raise
        raise NonFiniteError(step, loss, grad_norm) from err
