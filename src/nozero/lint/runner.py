"""Lint many files: cache look-ups first, then the misses spread over processes.

Only a file that holds trigger text reaches the engine, and only then are the engine and
libcst imported: a pre-commit run over files without any stays a fraction of a second.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nozero.lint import prefilter
from nozero.lint.cache import Cache, Row, content_hash
from nozero.lint.check import UNUSED_NOQA
from nozero.lint.config import Selection
from nozero.lint.files import is_test_module
from nozero.lint.finding import Finding, Problem
from nozero.lint.noqa import has_nozero_noqa
from nozero.lint.project import Item, Project, Projects, View

if TYPE_CHECKING:
    import multiprocessing.context
    from concurrent.futures import ProcessPoolExecutor


def _pool_context() -> multiprocessing.context.BaseContext:
    """Fork (fast) in a single-threaded process; forkserver once native threads exist.

    Forking a process that runs other threads (JAX's thread pools, when nozero is called
    from a program or test session that imported JAX) can deadlock the child.
    """
    import multiprocessing

    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux: let the platform's default decide
        return multiprocessing.get_context()
    return multiprocessing.get_context("fork" if threads == 1 else "forkserver")


# Below this many files to lint, starting worker processes costs more than it saves.
MIN_FILES_FOR_POOL = 8


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: int = 0
    from_cache: int = 0


@dataclass(frozen=True)
class Job:
    """What every worker needs to lint a file the same way as the parent would."""

    enabled: frozenset[str]
    require_reason: bool

    @property
    def checks_reasons(self) -> bool:
        return self.require_reason and "NZ002" in self.enabled

    @property
    def checks_noqa(self) -> bool:
        return UNUSED_NOQA in self.enabled


@dataclass
class _Pending:
    shown: str
    absolute: Path
    stat: os.stat_result | None
    data: bytes
    digest: str  # the content hash, and the view's when the file sees its project
    view: View | None = None


def decode_source(data: bytes) -> str:
    """Source text the way Python itself decodes a file: BOM, PEP 263 cookie, else UTF-8.

    Raises ValueError with a readable reason when the bytes are not valid source text.
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except SyntaxError as err:  # a bad coding cookie, or undecodable first lines
        reason = err.msg
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as utf8_err:
            reason = f"not UTF-8 and no valid coding declaration ({utf8_err})"
        raise ValueError(f"cannot decode: {reason}") from err
    except (UnicodeDecodeError, LookupError) as err:
        raise ValueError(f"cannot decode: {err}") from err


# ("ok", rows), ("undecodable", [reason]) or ("internal", [message, traceback]).
Outcome = tuple[str, list]


def lint_one(shown: str, data: bytes, job: Job, view: View | None = None) -> Outcome:
    """What linting one file came to (picklable: workers send it back).

    Never raises: one bad file must not hide the findings of the others.
    """
    try:
        source = decode_source(data)
    except ValueError as err:
        return "undecodable", [str(err)]
    if not (
        view
        or prefilter.concerns_nozero(source, job.checks_reasons)
        or (job.checks_noqa and has_nozero_noqa(source))
    ):
        return "ok", []  # what the engine answers too, without importing it (and libcst)
    try:
        from nozero.lint.check import check_source

        findings = check_source(
            source, shown, select=job.enabled, require_reason=job.require_reason, view=view
        )
    except Exception as err:  # noqa: BLE001 - reported with the path, then the run goes on
        import traceback

        frames = traceback.format_exception(err, limit=-4, chain=False)
        message = f"internal error ({type(err).__name__}: {err}); please report it"
        return "internal", [message, "".join(frames)]
    return "ok", [[f.line, f.col, f.code, f.message, f.end_line] for f in findings]


Work = tuple[str, bytes, Job, "View | None"]


# What the first pass hands back per module: its summary (JSON data), its outcome
# without a view when this run lints it (None: linted in its own turn), and the names its
# import statements bind (None: not read), which its view is later built from.
FirstPass = tuple[list, "Outcome | None", "list | None"]


def _lint_and_summarize(path: str, data: bytes, job: Job | None) -> FirstPass:
    """A module's summary and, given a job, its outcome without a view and its imports;
    never raises. The text is screened once: a module without trigger text has no fact
    and no finding (what ``lint_one`` and ``summarize`` answer too, each after its own
    screen)."""
    from nozero.lint.project import import_bindings, summarize_bytes
    from nozero.lint.summary import EMPTY, reexports_summary

    if job is None:
        return summarize_bytes((path, data, "")), None, None

    try:
        source = decode_source(data)
    except ValueError as err:
        return EMPTY.to_json(), ("undecodable", [str(err)]), None
    imports = None if is_test_module(path) else import_bindings(source)
    if not (
        prefilter.concerns_nozero(source, job.checks_reasons)
        or (job.checks_noqa and has_nozero_noqa(source))
    ):
        return reexports_summary(source, path).to_json(), ("ok", []), imports
    try:
        from nozero.lint.engine import lint_and_summarize

        findings, summary = lint_and_summarize(
            source, path, select=job.enabled, require_reason=job.require_reason
        )
    except Exception:  # noqa: BLE001 - the file's own turn reports the error
        return EMPTY.to_json(), ("retry", []), imports
    if job.checks_noqa and has_nozero_noqa(source):
        return summary.to_json(), None, imports  # NZ003 reads the comments too: own turn
    rows = [[f.line, f.col, f.code, f.message, f.end_line] for f in findings]
    return summary.to_json(), ("ok", rows), imports


def _lint_and_summarize_chunk(chunk: list[tuple[str, bytes, Job | None]]) -> list[FirstPass]:
    with _collector_off():  # most of a chunk is screening: no cycle worth a collection
        return [_lint_and_summarize(*item) for item in chunk]


def _worker_start() -> None:
    """A worker's inherited objects (the engine, libcst) are never garbage: frozen, the
    collector no longer walks them on every collection of the files' objects."""
    gc.freeze()


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _lint_chunk(chunk: list[Work]) -> list[Outcome]:
    with _collector_off():
        return [lint_one(*item) for item in chunk]


def _chunks(work: list[Work], pieces: int) -> list[list[Work]]:
    """Consecutive runs of ``work`` of about equal size in bytes (one big file may make a
    chunk of its own), so the workers finish together."""
    budget = max(1, sum(len(item[1]) for item in work) // pieces)
    chunks: list[list[Work]] = [[]]
    filled = 0
    for item in work:
        if filled >= budget:
            chunks.append([])
            filled = 0
        chunks[-1].append(item)
        filled += len(item[1])
    return chunks


class Runner:
    """Lints files (or stdin) with one selection, through the cache when one is given."""

    def __init__(
        self,
        selection: Selection,
        require_reason: bool,
        cache: Cache | None,
        jobs: int,
        progress: Callable[[int, int], None] | None = None,
        root: Path | None = None,
    ) -> None:
        self.selection = selection
        self.job = Job(selection.enabled, require_reason)
        self.cache = cache
        self.jobs = max(1, jobs)
        self.progress = progress
        self.projects = Projects(cache.directory if cache else None, self._map, root)
        self._early: dict[str, Outcome] = {}  # content hash -> outcome without a view
        self._imports: dict[str, list] = {}  # content hash -> the names its imports bind
        self._read: dict[str, tuple[bytes, str]] = {}  # path -> bytes read for its project
        self._executor: ProcessPoolExecutor | None = None
        self._linting: set[str] = set()  # the absolute paths this run lints

    def _map(self, function: Callable[[Item], list], items: list[Item]) -> Iterable[list]:
        """The summaries of the project's modules that have none yet. Each module this
        run lints is linted in the same pass (without a view: most files have none) and
        its imports read, spread over processes, and the outcome kept for the file's own
        turn, which then costs nothing; the others are only summarised (no libcst). The
        workers screen the text, so the parent reads each module once and screens none."""
        work = [
            (path, data, self.job if path in self._linting else None) for path, data, _ in items
        ]
        if len(work) < MIN_FILES_FOR_POOL or self.jobs == 1:
            done = [_lint_and_summarize(*item) for item in work]
        else:
            # Largest first: a big module with trigger text costs most, and is not left
            # to run alone at the end; results come back in the items' order.
            order = sorted(range(len(work)), key=lambda i: -len(work[i][1]))
            ordered = [work[i] for i in order]
            chunks = self._pool().map(_lint_and_summarize_chunk, _chunks(ordered, self.jobs * 16))
            found = [pair for chunk in chunks for pair in chunk]
            done = [found[0]] * len(work)
            for position, index in enumerate(order):
                done[index] = found[position]
        for (path, data, digest), (_, outcome, imports) in zip(items, done, strict=True):
            if path in self._linting:  # the file's own turn takes these bytes if unchanged
                self._read[path] = (data, digest)
            if outcome is not None:
                self._early[digest] = outcome
            if imports is not None:
                self._imports[digest] = imports
        return [summary for summary, _, _ in done]

    def _pool(self) -> ProcessPoolExecutor:
        """The run's worker processes, started on first use and shared by its passes."""
        if self._executor is None:
            from concurrent.futures import ProcessPoolExecutor

            import nozero.lint.engine  # noqa: F401 - imported once here, inherited by workers

            self._executor = ProcessPoolExecutor(
                self.jobs, mp_context=_pool_context(), initializer=_worker_start
            )
        return self._executor

    def lint_files(self, paths: Sequence[Path]) -> Report:
        with self._workers():
            return self._lint_files(paths)

    @contextlib.contextmanager
    def _workers(self) -> Iterator[None]:
        """Whatever worker processes the run started are stopped when it ends."""
        try:
            yield
        finally:
            if self._executor is not None:
                self._executor.shutdown()
                self._executor = None

    def _lint_files(self, paths: Sequence[Path]) -> Report:
        report = Report(files=len(paths))
        pending: list[_Pending] = []
        absolutes = [path.absolute() for path in paths]  # made once each (parsing costs)
        self._linting = {absolute.as_posix() for absolute in absolutes}
        for shown_path, absolute in zip(paths, absolutes, strict=True):
            shown = str(shown_path)
            project = self.projects.of(absolute)
            try:
                stat = absolute.stat()
                digest = self._known(absolute, stat, project)
                rows = self.cache.lookup(digest) if self.cache and digest else None
                if rows is not None:
                    report.from_cache += 1
                    self._add(report, shown, absolute, rows)
                    continue
                data, digest = self._bytes(absolute, stat, project)
            except OSError as err:
                report.problems.append(Problem(shown, f"cannot read: {err.strerror}"))
                continue
            pending.append(self._pending(shown, absolute, stat, data, project, digest))
        self._lint_pending(pending, report)
        return self._finish(report)

    def lint_stdin(self, data: bytes, shown: str) -> Report:
        report = Report(files=1)
        absolute = Path(shown).absolute()
        with self._workers():
            project = self.projects.of(absolute)
            self._lint_pending([self._pending(shown, absolute, None, data, project)], report)
        return self._finish(report)

    def _bytes(
        self, absolute: Path, stat: os.stat_result, project: Project | None
    ) -> tuple[bytes, str | None]:
        """The file's bytes and content hash: those its project's summary was made from
        while the file's size and mtime are those seen then, else read again."""
        key = absolute.as_posix()
        read = self._read.pop(key, None)
        if read and project and project.read.get(key) == (stat.st_size, stat.st_mtime_ns):
            return read
        return absolute.read_bytes(), None

    def _known(self, absolute: Path, stat: os.stat_result, project: Project | None) -> str | None:
        """The recorded key of an unchanged file, trusted while its project's summaries
        are those the key was made with."""
        if self.cache is None:
            return None
        if project is not None and project.has_facts:
            if not self.cache.project_unchanged(str(project.root), project.digest):
                return None
        return self.cache.known_hash(str(absolute), stat)

    def _pending(
        self,
        shown: str,
        absolute: Path,
        stat: os.stat_result | None,
        data: bytes,
        project: Project | None,
        digest: str | None = None,
    ) -> _Pending:
        digest = digest or content_hash(data)
        view = None
        # A test module's findings never depend on its project (nothing is reported in
        # one but its suppression comments): it is linted without a view.
        if project is not None and project.has_facts and not is_test_module(shown):
            try:
                imports = self._imports.get(digest)  # read by the first pass, if it ran
                view = project.view(absolute, decode_source(data), imports) or None
            except ValueError:
                view = None  # undecodable: reported when linted
        if view is not None:
            digest = f"{digest}:{view.digest}"
        return _Pending(shown, absolute, stat, data, digest, view)

    def _lint_pending(self, pending: list[_Pending], report: Report) -> None:
        """Lint what the cache cannot answer; identical contents (empty ``__init__.py``
        files, copies) are linted once, since findings do not depend on the path."""
        by_digest: dict[str, list[_Pending]] = {}
        for item in pending:
            rows = self.cache.lookup(item.digest) if self.cache else None
            early = self._early.get(item.digest) if rows is None else None
            if early is not None and early[0] == "ok":  # linted while its project was summarised
                self._remember(item, early[1])
                self._add(report, item.shown, item.absolute, early[1])
                continue
            if rows is None:
                by_digest.setdefault(item.digest, []).append(item)
                continue
            report.from_cache += 1
            self._remember(item, None)
            self._add(report, item.shown, item.absolute, rows)
        # Largest first, in small chunks: no big file is left to run alone at the end.
        groups = sorted(by_digest.values(), key=lambda same: -len(same[0].data))
        work = [(same[0].shown, same[0].data, self.job, same[0].view) for same in groups]
        if len(work) >= MIN_FILES_FOR_POOL and self.jobs > 1:
            chunks = self._pool().map(_lint_chunk, _chunks(work, self.jobs * 16))
            self._collect(groups, (o for chunk in chunks for o in chunk), report)
        else:
            self._collect(groups, (lint_one(*item) for item in work), report)

    def _collect(
        self,
        groups: list[list[_Pending]],
        outcomes: Iterable[Outcome],
        report: Report,
    ) -> None:
        for done, (same, (status, payload)) in enumerate(zip(groups, outcomes, strict=True), 1):
            if self.progress:
                self.progress(done, len(groups))
            for item in same:
                if status == "ok":
                    self._remember(item, payload)
                    self._add(report, item.shown, item.absolute, payload)
                else:
                    internal = status == "internal"
                    detail = "".join(payload[1:])
                    report.problems.append(Problem(item.shown, payload[0], internal, detail))

    def _remember(self, item: _Pending, rows: list[Row] | None) -> None:
        if self.cache:
            path = str(item.absolute) if item.stat else None
            self.cache.store(path, item.stat, item.digest, rows)

    def _add(self, report: Report, shown: str, absolute: Path, rows: list[Row]) -> None:
        enabled = self.selection.enabled
        if self.selection.per_file:
            enabled = enabled - self.selection.ignored_for(absolute)
        report.findings.extend(Finding(shown, *row) for row in rows if row[2] in enabled)

    def _finish(self, report: Report) -> Report:
        if self.cache:
            for project in self.projects.known():
                self.cache.record_project(str(project.root), project.digest)
            self.cache.save()
        self.projects.save()
        report.findings.sort()
        return report
