"""2 processes x 2 forced host devices, started by the real launcher, against one device."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from durability.helpers import killed_after

from nozero import MESSAGE_PATTERN, NonFiniteError
from nozero_trainer import loop

from .conftest import WORKER, final_params, launch_worker, records, start_worker
from .shared_data import SPLIT, config, dataset


def test_clean_run_on_two_processes_ends_allclose_to_one_device(tmp_path):
    done = launch_worker("arrays", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = records(tmp_path)
    assert [r["devices"] for r in seen] == [4, 4]
    assert [r["counts"] for r in seen] == [[29, 21]] * 2
    reference = loop.train_arrays(config(), *dataset())
    want = jax.tree.leaves(reference.state.params)
    for process in (0, 1):
        for got, expected in zip(final_params(tmp_path, process), want, strict=True):
            np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(seen[process]["loss"], reference.steps["loss"], rtol=1e-5)


def test_four_devices_in_one_process_end_allclose_to_one_device(tmp_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    done = subprocess.run(
        [sys.executable, str(WORKER), "arrays", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (seen,) = records(tmp_path, processes=1)
    assert (seen["devices"], seen["counts"]) == (4, [50])
    reference = loop.train_arrays(config(), *dataset())
    for got, want in zip(
        final_params(tmp_path, 0), jax.tree.leaves(reference.state.params), strict=True
    ):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6)


def test_row_poisoned_in_process_one_share_halts_both_at_that_step(tmp_path):
    poisoned = 40  # process 1 holds rows 29..49
    assert SPLIT[2][1] <= poisoned
    with pytest.raises(NonFiniteError) as one_device:
        loop.train_arrays(config(), *dataset(poisoned))
    done = launch_worker("arrays", tmp_path, str(poisoned))
    assert done.returncode == 3, done.stderr[-3000:]
    seen = records(tmp_path)
    assert {r["step"] for r in seen} == {one_device.value.step}
    assert seen[0]["halt"] == seen[1]["halt"] == str(one_device.value)
    assert MESSAGE_PATTERN.fullmatch(seen[0]["halt"])
    assert poisoned in seen[0]["rows"]
    # The post-mortem's view: the one poisoned row sat on a device of process 1.
    for record in seen:
        assert [(p["row"], p["process"]) for p in record["poisoned"]] == [(poisoned, 1)]
        assert record["poisoned"][0]["device"] >= 2048  # process 1's device ids (jax 0.10)
    for process in (0, 1):
        assert f"[p{process}] {one_device.value}" in done.stderr


def test_sigkill_of_one_process_ends_the_other_within_60_s(tmp_path):
    launcher = start_worker("kill-after", tmp_path)
    try:
        lines = []
        with killed_after(launcher, 180):  # a launcher that hangs silent ends the read
            for line in launcher.stderr:  # process 1 SIGKILLs itself right after saying so
                lines.append(line)
                if line.startswith("[p1] process 1 trained once"):
                    break
        killed_at = time.monotonic()
        rest = launcher.communicate(timeout=60)[1]
        elapsed = time.monotonic() - killed_at
    finally:
        launcher.kill()
    assert elapsed < 60, elapsed
    assert launcher.returncode != 0
    assert re.search(
        r"\[p0\] stopped by the distributed runtime \(killed by SIGABRT\): "
        r"process 1 died first \(killed by SIGKILL\)",
        rest,
    ), rest
    assert "Check failure stack trace" not in "".join(lines) + rest
