"""nozero for any JAX loop: the exact-step guard, an optax recorder and error converters.

Needs jax, optax and numpy (``pip install 'nozero[train]'``); nothing else in nozero
imports this package, so the linter and the pytest plugin never pull JAX in.
"""

from nozero._extras import require

require("nozero.jax", "train", ("jax", "optax", "numpy"))

from nozero.jax.convert import converts, nonfinite_errors
from nozero.jax.guard import Guard, GuardResult, scan_steps
from nozero.jax.halt import GuardHalt, StepContext
from nozero.jax.optax_record import NonFiniteRecordState, find_records, record_nonfinite
from nozero.jax.record import all_finite
from nozero.traces import count_traces

__all__ = [
    "Guard",
    "GuardHalt",
    "GuardResult",
    "NonFiniteRecordState",
    "StepContext",
    "all_finite",
    "converts",
    "count_traces",
    "find_records",
    "nonfinite_errors",
    "record_nonfinite",
    "scan_steps",
]
