"""The on-disk result cache: findings by content hash, for one tool build and configuration.

One JSON file per configuration key holds two maps:

* ``files``: absolute path -> [size, mtime_ns, content hash], so a warm run that finds a
  file's size and mtime unchanged skips reading and hashing it;
* ``results``: content hash -> the findings (without their path, which is re-attached),
  so a touched-but-unchanged file, a copy or a rename costs one hash and no lint.

A stat fingerprint is only trusted for files whose mtime was at least a couple of seconds
old when they were read (git's "racily clean" rule): a file rewritten within the same
timestamp tick is re-hashed, never served stale findings.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
import time
from collections.abc import Collection
from pathlib import Path

from nozero import __version__
from nozero._atomic import atomic_write_text

try:  # hashlib loads OpenSSL when imported: a few ms of every pre-commit run, for BLAKE2
    from _blake2 import blake2b
except ImportError:  # not CPython
    from hashlib import blake2b

FORMAT_VERSION = 1
RACY_WINDOW_NS = 2_000_000_000
Row = list  # [line, col, code, message, end_line]


def file_entry(started_ns: int, stat: os.stat_result, digest: str) -> list[int | str]:
    """A file's fingerprint row: size, mtime and content digest; a file changed within
    ``RACY_WINDOW_NS`` of the run's start keeps only its digest, so it is hashed again."""
    trusted = started_ns - stat.st_mtime_ns >= RACY_WINDOW_NS
    return [stat.st_size, stat.st_mtime_ns, digest] if trusted else [-1, -1, digest]


def content_hash(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


@functools.cache
def code_fingerprint() -> str:
    """The tool's version, its lint code, the Python and libcst versions (which decide
    what parses): an edited rule never serves results cached by the code before the edit.
    Each lint module counts by its size and mtime, as ``make`` would judge it: reading
    them all cost a warm pre-commit run 3 ms. libcst is located, not imported."""
    digest = blake2b(digest_size=16)
    digest.update(f"{FORMAT_VERSION}|{__version__}|{sys.version_info[:2]}".encode())
    libcst = importlib.util.find_spec("libcst")
    if libcst is not None and libcst.origin:
        version_file = Path(libcst.origin).with_name("_version.py")
        digest.update(version_file.read_bytes() if version_file.exists() else b"?")
    lint_package = Path(__file__).parent
    for source in sorted(lint_package.rglob("*.py")):
        stat = source.stat()
        digest.update(f"{source.relative_to(lint_package).as_posix()}|{stat.st_size}|".encode())
        digest.update(f"{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def config_key(enabled: Collection[str], require_reason: bool) -> str:
    """Everything that changes findings for the same bytes: the code, the enabled codes
    and ``require_reason``. Per-file ignores are applied after the cache, by path."""
    text = f"{code_fingerprint()}|{sorted(enabled)}|{require_reason}"
    return blake2b(text.encode(), digest_size=16).hexdigest()


class Cache:
    """Read once at start, written once (atomically) at the end of a run."""

    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.file = directory / f"results-{code_fingerprint()[:16]}-{key[:16]}.json"
        self.started_ns = time.time_ns()
        self.dirty = False
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
            self.files: dict[str, list] = data["files"]
            self.results: dict[str, list[Row]] = data["results"]
            self.projects: dict[str, str] = data.get("projects", {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            # A missing or damaged cache only costs time; it never stops a lint run.
            self.files, self.results, self.projects = {}, {}, {}

    def known_hash(self, path: str, stat: os.stat_result) -> str | None:
        """The content hash recorded for ``path`` if its size and mtime are unchanged."""
        entry = self.files.get(path)
        if entry and entry[0] == stat.st_size and entry[1] == stat.st_mtime_ns:
            return entry[2]
        return None

    def project_unchanged(self, root: str, digest: str) -> bool:
        """Were the project's summaries the same when the recorded results were made? A
        file's findings depend on them, so its recorded key is only trusted then."""
        return self.projects.get(root) == digest

    def record_project(self, root: str, digest: str) -> None:
        if self.projects.get(root) != digest:
            self.projects[root] = digest
            self.dirty = True

    def lookup(self, digest: str) -> list[Row] | None:
        return self.results.get(digest)

    def store(
        self, path: str | None, stat: os.stat_result | None, digest: str, rows: list[Row] | None
    ) -> None:
        """Record ``path``'s fingerprint (if trustworthy) and, when given, its findings."""
        if rows is not None:
            self.results[digest] = rows
            self.dirty = True
        if path is None or stat is None:
            return
        entry = file_entry(self.started_ns, stat, digest)
        if self.files.get(path) != entry:
            self.files[path] = entry
            self.dirty = True

    def save(self) -> None:
        """Write atomically, dropping results no recorded file refers to any more."""
        if not self.dirty:
            return
        referenced = {entry[2] for entry in self.files.values()}
        results = {d: rows for d, rows in self.results.items() if d in referenced}
        data = {"files": self.files, "results": results, "projects": self.projects}
        write_json_atomically(self.file, data)
        # Results of an older build of the code can never match again.
        current = code_fingerprint()[:16]
        for stale in self.directory.glob("results-*.json"):
            if current not in stale.name:
                stale.unlink(missing_ok=True)


def write_json_atomically(path: Path, data: object) -> None:
    """Temp file and rename: a reader sees the old cache or the new one, never half of
    one. Failing to write (a read-only checkout) only means running without a cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _mark_cache_directory(path.parent)
        atomic_write_text(path, json.dumps(data, separators=(",", ":")), durable=False)
    except OSError:
        pass


def _mark_cache_directory(directory: Path) -> None:
    """Keep the cache out of git and out of backups, as other tools' caches do."""
    ignore = directory / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Created by nozero.\n*\n", encoding="utf-8")
    tag = directory / "CACHEDIR.TAG"
    if not tag.exists():
        tag.write_text(
            "Signature: 8a477f597d28d172789f06886806bc55\n# nozero lint cache.\n",
            encoding="utf-8",
        )
