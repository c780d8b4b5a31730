"""Trainers registered by name (``pkg.module:factory`` in the ini file or on the command
line): import them, and when plain ``pytest`` cannot, say why and how to fix it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _module_home(top: str, rootdir: Path) -> Path | None:
    """The folder under the rootdir (itself, or ``src/``) that holds module ``top``."""
    for folder in (rootdir, rootdir / "src"):
        if (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file():
            return folder
    return None


def _import(module_name: str, spec: str, rootdir: Path) -> Any:
    """Import ``module_name``; a module that sits in the rootdir but is not on ``sys.path``
    (plain ``pytest`` does not add the current folder; ``python -m pytest`` does) is
    imported from there."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        top = module_name.split(".")[0]
        home = _module_home(top, rootdir) if err.name == top else None
        if home is None:
            raise pytest.UsageError(
                f"nozero_trainer {spec!r}: cannot import {module_name}: {err!r}. It is not on "
                f"sys.path, nor in the rootdir {rootdir} (or its src/). Plain `pytest` does "
                "not put the current folder on sys.path (`python -m pytest` does): add "
                "`pythonpath = <the folder holding it>` to the [pytest] ini section, or "
                "install the package (pip install -e .)."
            ) from err
    except Exception as err:
        message = f"nozero_trainer {spec!r}: cannot import {module_name}: {err!r}"
        raise pytest.UsageError(message) from err
    sys.path.append(str(home))
    try:
        return importlib.import_module(module_name)
    except Exception as err:
        message = f"nozero_trainer {spec!r}: cannot import {module_name} from {home}: {err!r}"
        raise pytest.UsageError(message) from err


def load_factory(spec: str, rootdir: Path) -> Callable[[], Any]:
    """Import ``pkg.module:attr.path``; errors name the ini option and the cause."""
    module_name, _, attr_path = spec.partition(":")
    target: Any = _import(module_name, spec, rootdir)
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            message = f"nozero_trainer {spec!r}: {module_name} has no {attr_path}"
            raise pytest.UsageError(message) from None
    if not callable(target):
        raise pytest.UsageError(f"nozero_trainer {spec!r} is not callable")
    return target
