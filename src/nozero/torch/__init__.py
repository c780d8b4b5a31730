"""nozero for PyTorch: the exact-step guard for a plain loop, Lightning and Hugging Face.

Needs torch (``pip install 'nozero[torch]'``); nothing else in nozero imports this
package, so the linter and the pytest plugin never pull torch in. The adapters live in
:mod:`nozero.torch.lightning` and :mod:`nozero.torch.huggingface`.
"""

from nozero.torch.guard import Guard
from nozero.torch.halt import GuardHalt, HaltContext
from nozero.torch.scaling import MAX_SCALER_SKIPS, MIN_SCALE

__all__ = ["MAX_SCALER_SKIPS", "MIN_SCALE", "Guard", "GuardHalt", "HaltContext"]
