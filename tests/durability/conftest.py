"""Fixtures shared by the durability tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from nozero_trainer.synthetic import make_data

    return make_data(tmp_path_factory.mktemp("durability") / "data", 3000, 16, 0, shards=2)
