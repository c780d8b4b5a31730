"""pytest --nozero: contract tests for trainers (see nozero.testing). Cheap to import."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nozero", "non-finite training contract")
    group.addoption(
        "--nozero",
        action="store_true",
        default=False,
        help="run the non-finite contract against every registered trainer",
    )
