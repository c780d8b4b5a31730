"""A run directory's record: ``metrics.jsonl`` (one event per line) and ``status.json``.

Both are strict JSON (see :mod:`nozero_trainer.strict_json`): a non-finite value is
``null`` with a ``nonfinite`` entry saying which it was. The runner writes them, the
plot and the post-mortem read them, through this module only. No numpy or JAX here, so
reading a run needs no ``[train]`` extra. The events' fields are listed in
docs/trainer/outputs.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nozero._atomic import atomic_write_text
from nozero_trainer import strict_json

METRICS = "metrics.jsonl"
STATUS = "status.json"


class MetricsLog:
    """``metrics.jsonl``, appended line by line and flushed, so a kill loses at most a line.

    Resuming appends to it; a line torn by a kill is cut off first, so the file stays one
    JSON object per line. Steps the killed process logged after its last checkpoint are
    logged again by the resumed run, after a ``resume`` event that says from where.
    """

    def __init__(self, path: Path, append: bool) -> None:
        if append and path.exists():
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                with path.open("r+b") as handle:
                    handle.truncate(data.rfind(b"\n") + 1)
        self.handle = path.open("a" if append else "w", encoding="utf-8")

    def write(self, event: Mapping[str, Any]) -> None:
        self.handle.write(strict_json.dumps(event) + "\n")
        self.handle.flush()

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Events of a ``metrics.jsonl``; a torn last line (the process was killed) is skipped."""
    records = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(strict_json.loads(line, accept_bare=True))
        except ValueError as err:
            if number != len(lines):
                raise ValueError(f"{path}: line {number} is not JSON ({err})") from err
    return records


def write_status(run_dir: str | os.PathLike[str], status: Mapping[str, Any]) -> None:
    """Replace ``status.json`` in one step: readers never see half of it."""
    atomic_write_text(Path(run_dir) / STATUS, strict_json.dumps(status, indent=2) + "\n")


def read_status(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's ``status.json``, or ``None`` when it has none."""
    try:
        return strict_json.loads((Path(run_dir) / STATUS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
