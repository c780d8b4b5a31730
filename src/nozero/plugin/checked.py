"""The values a trainer hands to ``nozero.check_finite``, seen while it runs.

A run that returns a model and no history still shows its per-step losses this way when
it checks them with ``check_finite``: the ``overflow`` check can then vouch for every
step, as it does for a returned history. Seen through a profile hook on the run's own
thread (set only for the runs that need it), so trainers change nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nozero.contract import check_finite

Seen = list[tuple[Any, Any, Any]]
_CODE = check_finite.__code__


def recorder(seen: Seen) -> Callable[[Any, str, Any], None]:
    """A ``sys.setprofile`` function appending ``(step, loss, grad_norm)`` per call."""

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is _CODE:
            values = frame.f_locals
            seen.append((values.get("step"), values.get("loss"), values.get("grad_norm")))

    return profile


def steps_checked(seen: Seen) -> set[int]:
    """The steps whose values were checked (each call raised or passed on finite values)."""
    steps = set()
    for step, _, _ in seen:
        try:
            steps.add(int(step))
        except (TypeError, ValueError):
            continue
    return steps
