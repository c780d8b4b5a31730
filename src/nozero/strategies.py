"""Hypothesis strategies for non-finite property tests: clean batches, poisons, poisoned runs.

They compose: ``poisoned_batch_sequences(spec, 8, clean=clean_batch_sequences(spec, 8),
poison=poisons(spec, 8, kinds=HUGE_KINDS))``. Every strategy keeps shapes fixed (so a
jitted trainer compiles once) and shrinks toward step 0, index 0 and the first poison kind.
Bad arguments raise Hypothesis's ``InvalidArgument``. ``pytest --nozero`` uses these same
strategies (they live in ``nozero.plugin.strategies``).
"""

from nozero._extras import require

require("nozero.strategies", "pytest", ("numpy", "hypothesis"))

from nozero.plugin.strategies import *  # noqa: F403  (the public names, re-exported)
from nozero.plugin.strategies import __all__  # noqa: F401
