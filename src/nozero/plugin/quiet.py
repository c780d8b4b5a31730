"""Framework noise off during the plugin's runs: Lightning's, Hugging Face's, absl's and
Keras' INFO logs and the libraries' Future/Deprecation warnings, printed once per run,
would bury a failing case under hundreds of lines. Warnings and errors of the trainer's
own code and the exception it raises are left as they are."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

NOISY_LOGGERS = (
    "lightning",
    "lightning.pytorch",
    "lightning.fabric",
    "lightning_fabric",
    "pytorch_lightning",
    "transformers",
    "accelerate",
    "absl",
    "keras",
)
NOISY_MODULES = (
    r"(lightning|lightning_fabric|pytorch_lightning|transformers|accelerate|keras|absl|torch)(\.|$)"
)


def _loggers() -> list[logging.Logger]:
    """The noisy loggers and every logger below them that sets its own level."""
    manager = logging.Logger.manager
    names = set(NOISY_LOGGERS)
    for name, logger in list(manager.loggerDict.items()):
        top = name.split(".")[0]
        if isinstance(logger, logging.Logger) and logger.level and top in NOISY_LOGGERS:
            names.add(name)
    return [logging.getLogger(name) for name in sorted(names)]


@contextlib.contextmanager
def quiet_frameworks() -> Iterator[None]:
    """Within the block, the frameworks log warnings and errors only, and their
    FutureWarnings, DeprecationWarnings and UserWarnings are not shown."""
    loggers = _loggers()
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        for category in (FutureWarning, DeprecationWarning, UserWarning):
            warnings.filterwarnings("ignore", category=category, module=NOISY_MODULES)
        warnings.filterwarnings("ignore", category=FutureWarning)
        try:
            for logger in loggers:
                if logger.getEffectiveLevel() < logging.WARNING:
                    logger.setLevel(logging.WARNING)
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
