"""One process of a multi-process test run (started by ``launch.run_processes``).

``worker.py MODE OUT [POISON_ROW]`` joins the run the ``NOZERO_*`` variables describe,
trains on its share of one fixed data set and writes what it saw to ``OUT/pI.json``
(and its final parameters to ``OUT/pI.npz``). Modes: ``arrays`` trains; ``kill-after``
trains, then one process SIGKILLs itself while the other keeps training.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: trainer.conftest
from shared_data import SPLIT, config, dataset  # noqa: E402 (beside this script)

from nozero import NonFiniteError
from nozero_trainer import distributed, loop
from nozero_trainer.sharding import batch_holders, data_placement


def main() -> int:
    mode, out = sys.argv[1], Path(sys.argv[2])
    poison_row = int(sys.argv[3]) if len(sys.argv) > 3 else None
    distributed.initialize(distributed.settings_from())
    me, count = jax.process_index(), jax.process_count()
    x, y = dataset(poison_row)
    bounds = SPLIT[count]
    x, y = x[bounds[me] : bounds[me + 1]], y[bounds[me] : bounds[me + 1]]
    counts = distributed.exchange("rows", len(x))
    placement = data_placement()
    record: dict = {"process": me, "devices": placement.devices, "counts": counts}
    if mode == "kill-after":
        loop.train_arrays(config(), x, y, placement=placement, row_counts=counts)
        print(f"process {me} trained once", file=sys.stderr, flush=True)
        if me == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # every run is collective: without its peer this must end
            loop.train_arrays(config(), x, y, placement=placement, row_counts=counts)
    try:
        result = loop.train_arrays(config(), x, y, placement=placement, row_counts=counts)
    except NonFiniteError as err:
        context = err.context
        poisoned = ~np.isfinite(context.batch["cls"]).all(axis=1)
        holders = batch_holders(poisoned, context.row_indices, placement)
        record.update(
            halt=str(err),
            step=err.step,
            rows=context.row_indices.tolist(),
            poisoned=holders["poisoned"],
        )
        (out / f"p{me}.json").write_text(json.dumps(record))
        print(str(err), file=sys.stderr, flush=True)
        return 3
    params = jax.device_get(result.state.params)
    np.savez(out / f"p{me}.npz", *jax.tree.leaves(params))
    record["loss"] = result.steps["loss"].tolist()
    (out / f"p{me}.json").write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
