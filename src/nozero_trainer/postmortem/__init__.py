"""What a halted run leaves behind, and the diagnosis ``nozero-train postmortem DIR`` prints.

When the guard stops a run, the step that went non-finite is replayed on the host from the
parameters and optimizer state of *before* that step (the loop never applied it), and
everything needed to investigate is written into ``RUN_DIR/postmortem/halt-NN-step-SSSSSSSS/``:

- ``halt.json``: step, loss, gradient norm, learning rate, the documented message, the
  per-head loss terms, the forward stages that went non-finite and the parameter leaves
  whose gradients did;
- ``batch.npz``: the offending batch and the row indices it was drawn from;
- ``params.npz``, ``opt_state.npz``: the pre-step state, named like checkpoint arrays;
- ``config.json``: the run configuration.

Three modules: :mod:`.replay` re-runs the step, :mod:`.bundle` writes and reads bundles,
:mod:`.diagnosis` turns a bundle into text a person can act on.
"""

from nozero_trainer.postmortem.bundle import (
    POSTMORTEM_DIR,
    ROW_INDICES,
    Bundle,
    find_bundles,
    read_bundle,
    write_bundle,
)
from nozero_trainer.postmortem.diagnosis import diagnose, diagnose_path, nonfinite_inputs
from nozero_trainer.postmortem.replay import (
    LossWithAux,
    Repeat,
    StepReplay,
    repeat_step,
    replay_step,
    trainer_loss_with_aux,
)

__all__ = [
    "POSTMORTEM_DIR",
    "ROW_INDICES",
    "Bundle",
    "LossWithAux",
    "Repeat",
    "StepReplay",
    "diagnose",
    "diagnose_path",
    "find_bundles",
    "nonfinite_inputs",
    "read_bundle",
    "repeat_step",
    "replay_step",
    "trainer_loss_with_aux",
    "write_bundle",
]
