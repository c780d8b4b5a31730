"""The sharded reference trainer (4 forced host devices) passes ``pytest --nozero``."""

from __future__ import annotations

import subprocess
import sys

SHARDED = "nozero_trainer.contract_target:sharded_trainer"


def test_sharded_trainer_passes_the_contract_compiling_at_most_once(tmp_path):
    # A fresh pytest process, as a user runs it; the trainer's own process has 4 devices.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nozero",
            f"--nozero-trainer={SHARDED}",
            "--nozero-examples=5",
            "--nozero-steps=3",
            "-p",
            "no:cacheprovider",
            "-v",
            "-o",
            "nozero_trainer=",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"nozero::never_continue[{SHARDED}] PASSED" in done.stdout
    assert "4 passed" in done.stdout
