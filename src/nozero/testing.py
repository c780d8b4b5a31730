"""What ``pytest --nozero`` tests: a trainer described by its batches and its run function.

Register one with a ``nozero_trainer`` fixture (in a conftest) returning a
:class:`TrainerUnderTest`, or with the ini option ``nozero_trainer = pkg.mod:factory``.
Nothing here depends on a framework: ``run`` may use JAX, PyTorch, Keras or plain numpy.
"""

from nozero._extras import require

require("nozero.testing", "pytest", ("numpy", "hypothesis"))

from nozero.plugin.batches import FieldRange
from nozero.plugin.trainer import TrainerUnderTest
from nozero.traces import count_traces

__all__ = ["FieldRange", "TrainerUnderTest", "count_traces"]
