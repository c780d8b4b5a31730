"""Row layout, batch checks and process settings: plain functions, no extra processes."""

from __future__ import annotations

import numpy as np
import pytest

from nozero_trainer import distributed
from nozero_trainer.data import Share
from nozero_trainer.sharding import RowLayout, check_global_batch, data_placement


def test_padded_rows_skip_each_process_padding_and_empty_shares():
    layout = RowLayout.plan([5, 0, 3], devices_per_process=2)
    assert layout.capacity == 6 and layout.rows == 8
    np.testing.assert_array_equal(layout.padded(np.arange(8)), [0, 1, 2, 3, 4, 12, 13, 14])
    np.testing.assert_array_equal(layout.owner(np.arange(8)), [0] * 5 + [2] * 3)


def test_shares_are_contiguous_blocks_in_shard_order():
    paths = [f"part-{i}" for i in range(5)]
    blocks = [Share(p, 3).of(paths) for p in range(3)]
    assert sum(blocks, []) == paths
    assert [len(b) for b in blocks] == [2, 1, 2]


def test_global_batch_must_divide_by_the_device_count():
    placement = data_placement()
    check_global_batch(placement.devices * 3, placement)
    if placement.devices > 1:
        with pytest.raises(ValueError, match="must divide by the device count"):
            check_global_batch(placement.devices * 3 + 1, placement)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"coordinator": "host:1"}, "missing: --num-processes, --process-id"),
        ({"coordinator": "nohost", "num_processes": 2, "process_id": 0}, "HOST:PORT"),
        ({"coordinator": "h:1", "num_processes": 2, "process_id": 2}, r"in \[0, 1\]"),
    ],
)
def test_incomplete_or_impossible_process_flags_are_refused(flags, message):
    with pytest.raises(ValueError, match=message):
        distributed.settings_from(**flags, environ={})


def test_environment_fills_in_what_the_flags_leave_out():
    environ = {
        "NOZERO_COORDINATOR": "h:9",
        "NOZERO_NUM_PROCESSES": "2",
        "NOZERO_PROCESS_ID": "1",
        "NOZERO_HEARTBEAT_TIMEOUT": "4",
    }
    settings = distributed.settings_from(environ=environ)
    assert (settings.coordinator, settings.num_processes, settings.process_id) == ("h:9", 2, 1)
    assert settings.heartbeat_timeout == 4
    assert not distributed.initialize(distributed.settings_from(environ={}), environ={})
