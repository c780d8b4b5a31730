"""The values a trainer hands to ``nozero.check_finite``, seen while it runs.

A run that returns a model and no history still shows its per-step losses this way when
it checks them with ``check_finite``: the ``overflow`` check can then vouch for every
step, as it does for a returned history. ``check_finite`` tells its watchers of each
call (``nozero.contract.watching_checks``); only calls on the run's own thread count, so
a run abandoned earlier cannot add to this one's record, and trainers change nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from nozero.contract import watching_checks

Seen = list[tuple[Any, float, float]]


@contextlib.contextmanager
def recording(seen: Seen) -> Iterator[None]:
    """Within the block, append ``(step, loss, grad_norm)`` of each ``check_finite`` call
    made on the thread that entered it."""
    thread = threading.get_ident()

    def record(step: Any, loss: float, grad_norm: float) -> None:
        if threading.get_ident() == thread:
            seen.append((step, loss, grad_norm))

    with watching_checks(record):
        yield


def steps_checked(seen: Seen) -> set[int]:
    """The steps whose values were checked (each call raised or passed on finite values)."""
    steps = set()
    for step, _, _ in seen:
        try:
            steps.add(int(step))
        except (TypeError, ValueError):
            continue
    return steps
