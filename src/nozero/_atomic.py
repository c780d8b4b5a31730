"""Atomic files for the whole project: readers see the old content or the new, never half.

The lint cache, the rule pages, the trainer's checkpoints, status and scores all write
through here, so one implementation decides what "written" means: the bytes are fsynced,
renamed into place with ``os.replace`` and the directory entry is fsynced too. Standard
library only, because the linter's base install must not need more.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename inside ``path`` durable (a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically.

    Whatever the body writes to the temporary path becomes ``path`` in one ``os.replace``;
    on any error the temporary file is removed and an existing ``path`` is left untouched.
    ``durable=False`` skips the fsyncs: right for a cache, which may be lost but never torn.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{os.urandom(3).hex()}")
    try:
        yield tmp
        if durable:
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
        os.replace(tmp, target)
        if durable:
            fsync_dir(target.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step."""
    with atomic_output(path, durable=durable) as tmp:
        tmp.write_text(text, encoding="utf-8")
