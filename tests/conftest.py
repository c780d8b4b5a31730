"""Suite-wide set-up.

torch's C extension cannot be initialised twice in one process: a second ``import torch``
after its modules were dropped from ``sys.modules`` fails with "SystemError: bad call
flags" at ``from torch._C import *`` and then segfaults. The ``pytester`` fixture drops,
at teardown, every module imported while its test ran (by an in-process pytest run or by
the test itself, e.g. ``pytest.importorskip("torch")``). Importing torch once, before the
first test that uses ``pytester`` is set up, keeps it in the snapshot pytester restores.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Runs before the item's fixtures (pytester's snapshot) are set up."""
    if "torch" in sys.modules or "pytester" not in getattr(item, "fixturenames", ()):
        return
    if importlib.util.find_spec("torch") is not None:
        import torch  # noqa: F401
