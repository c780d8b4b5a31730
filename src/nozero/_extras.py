"""The one-line error for a part of nozero imported without the extra that installs its
dependencies: it names the extra, where Python alone would say "No module named 'numpy'".

``pip install 'nozero[EXTRA]'`` adds an extra's dependencies to an installed nozero (from
a clone or a wheel) without fetching nozero itself.
"""

from __future__ import annotations

import importlib.util


def missing_extra_message(part: str, module: str, extra: str) -> str:
    """What to print when ``part`` cannot import ``module``, installed by ``extra``."""
    return f"{part} needs {module}: pip install 'nozero[{extra}]'"


def require(part: str, extra: str, modules: tuple[str, ...]) -> None:
    """Raise ``ModuleNotFoundError`` naming ``extra`` unless every module can be imported.

    Only looks the modules up (``find_spec``): importing them is left to ``part``, so a
    check costs microseconds and the start-up cost of a light part stays light.
    """
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(missing_extra_message(part, module, extra), name=module)
