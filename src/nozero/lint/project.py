"""A project's modules, summarised, and what one file sees of them through its imports.

The project is the tree under the nearest directory holding ``pyproject.toml``,
``setup.py``, ``setup.cfg`` or ``.git``. Every module with trigger text is summarised
(``nozero.lint.summary``); summaries are cached by content hash, and a warm run costs
one ``stat`` per module. A file is then linted with its ``View``: the helpers it imports
from the project, and the switches it could turn on (the parameters of the functions
and classes it imports, and the attributes and config keys that gate a reaction
anywhere in the project). The view depends only on the file's text and the project's
summaries, so one file and the whole tree, cold or warm, get the same findings.
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nozero.lint.cache import (
    blake2b,
    code_fingerprint,
    content_hash,
    file_entry,
    write_json_atomically,
)
from nozero.lint.files import DEFAULT_EXCLUDE, FileFinder, compile_patterns
from nozero.lint.prefilter import could_hold_finding
from nozero.lint.summary import EMPTY, Helper, Summary, Switch, summarize

MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# A switch and where its reaction is: (the switch, the reaction's file shown to the user).
Route = tuple[Switch, str]


def project_root(file: Path) -> Path | None:
    """The nearest directory above ``file`` holding a project marker (None: no project)."""
    for directory in file.parents:
        if any((directory / marker).exists() for marker in MARKERS):
            return directory
    return None


@dataclass(frozen=True)
class View:
    """What one file sees of its project: picklable, and hashed into its cache key."""

    helpers: dict[str, Helper] = field(default_factory=dict)  # local name -> facts
    calls: dict[str, tuple[Route, ...]] = field(default_factory=dict)  # callee -> switches
    methods: dict[str, tuple[Route, ...]] = field(default_factory=dict)  # method name -> ...
    keys: dict[str, tuple[Route, ...]] = field(default_factory=dict)  # key name -> ...

    def __bool__(self) -> bool:
        return bool(self.helpers or self.calls or self.methods or self.keys)

    @property
    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True, default=list)
        return blake2b(text.encode(), digest_size=8).hexdigest()


class SummaryStore:
    """Summaries by content hash, and each module's stat fingerprint, in one JSON file.
    A module without any fact (most of them) is recorded with an empty hash."""

    def __init__(self, directory: Path | None) -> None:
        self.file = directory / f"project-{code_fingerprint()[:16]}.json" if directory else None
        self.started_ns = time.time_ns()
        self.dirty = False
        self.files: dict[str, list] = {}
        self.summaries: dict[str, list] = {}
        # root -> [{directory: [mtime_ns, .gitignore's mtime_ns or -1]}, [module paths]]
        self.listings: dict[str, list] = {}
        if self.file is None:
            return
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
            self.files, self.summaries = data["files"], data["summaries"]
            self.listings = data.get("listings", {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # a missing or damaged store only costs time

    def listing(self, root: Path) -> list[str]:
        """The project's modules: walked once, then kept while no directory holding one
        of them (nor its ``.gitignore``) has changed, which costs a ``stat`` per such
        directory instead of reading every directory. Directories without a module
        (checkpoints, logs a training run keeps writing) are not watched: a module that
        appears in one is found when the next directory of the project changes."""
        key = root.as_posix()
        known = self.listings.get(key)
        if known and all(_directory_stamp(d) == stamp for d, stamp in known[0].items()):
            return known[1]
        finder = FileFinder(compile_patterns(DEFAULT_EXCLUDE, root))  # .git, .venv, ...
        files = [shown.as_posix() for shown in finder.find([root])]
        holders = {key}
        for file in files:
            parent = file.rpartition("/")[0]
            while parent not in holders and len(parent) > len(key):
                holders.add(parent)
                parent = parent.rpartition("/")[0]
        stamps = {d: _directory_stamp(d) for d in finder.visited if d in holders}
        if key in stamps:  # else the walk saw other names for the paths (links): no reuse
            self.listings[key] = [stamps, files]
            self.dirty = True
        return files

    def known(self, path: str, stat: os.stat_result) -> Summary | None:
        """The summary of an unchanged module (same size and mtime), else None."""
        entry = self.files.get(path)
        if entry and entry[0] == stat.st_size and entry[1] == stat.st_mtime_ns:
            return self._summary(entry[2])
        return None

    def _summary(self, digest: str) -> Summary | None:
        if not digest:
            return EMPTY
        cached = self.summaries.get(digest)
        return None if cached is None else Summary.from_json(cached)

    def by_content(self, data: bytes) -> tuple[str, Summary | None]:
        digest = content_hash(data)  # the runner's cache key too: hashed once
        return digest, self._summary(digest)

    def record(self, path: str, stat: os.stat_result, digest: str, summary: Summary) -> None:
        if summary == EMPTY:
            digest = ""
        elif digest not in self.summaries:
            self.summaries[digest] = summary.to_json()
            self.dirty = True
        entry = file_entry(self.started_ns, stat, digest)
        if self.files.get(path) != entry:
            self.files[path] = entry
            self.dirty = True

    def save(self) -> None:
        if not (self.dirty and self.file):
            return
        used = {entry[2] for entry in self.files.values()}
        summaries = {d: s for d, s in self.summaries.items() if d in used}
        data = {"files": self.files, "summaries": summaries, "listings": self.listings}
        write_json_atomically(self.file, data)
        self.dirty = False


def _directory_stamp(directory: str) -> list[int]:
    """What changes when a directory's entries or its ``.gitignore`` do."""
    try:
        own = os.stat(directory).st_mtime_ns
    except OSError:
        return [-1, -1]
    try:
        ignore = os.stat(f"{directory}/.gitignore").st_mtime_ns
    except OSError:
        ignore = -1
    return [own, ignore]


def summarize_bytes(item: tuple[str, bytes, str]) -> list:
    """The summary (as JSON data) of one module's bytes (path, bytes, content hash): run
    in worker processes."""
    path, data, _ = item
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        return EMPTY.to_json()
    return summarize(source, path).to_json()


# ``mapper(function, items)``: the results of ``function`` over ``items`` (each module's
# path, bytes and content hash, hashed once), in order, maybe computed in other processes.
Item = tuple[str, bytes, str]
Mapper = Callable[[Callable[[Item], list], list[Item]], Iterable[list]]


def _serial(function: Callable[[Item], list], items: list[Item]) -> Iterable[list]:
    return map(function, items)


class Project:
    """The summaries of every module under ``root``."""

    def __init__(self, root: Path, store: SummaryStore, mapper: Mapper = _serial) -> None:
        self.root = root
        self.modules: dict[str, Summary] = {}
        # (size, mtime) of each module read here, whose bytes the mapper was given
        self.read: dict[str, tuple[int, int]] = {}
        missing: list[tuple[str, os.stat_result, str, bytes]] = []
        for absolute in store.listing(root):
            try:
                stat = os.stat(absolute)
                summary = store.known(absolute, stat)
                if summary is not None:
                    self.modules[absolute] = summary
                    continue
                data = Path(absolute).read_bytes()
            except OSError:
                continue
            digest, summary = store.by_content(data)
            if summary is None:  # screened where it is summarised (maybe another process)
                missing.append((absolute, stat, digest, data))
                self.read[absolute] = (stat.st_size, stat.st_mtime_ns)
                continue
            self.modules[absolute] = summary
            store.record(absolute, stat, digest, summary)
        found = mapper(summarize_bytes, [(path, data, digest) for path, _, digest, data in missing])
        for (path, stat, digest, _), data in zip(missing, found, strict=True):
            self.modules[path] = Summary.from_json(data)
            store.record(path, stat, digest, self.modules[path])
        self.modules = dict(sorted(self.modules.items()))
        self.paths = frozenset(self.modules)
        self.methods: dict[str, list[Route]] = {}
        self.keys: dict[str, list[Route]] = {}
        for path, summary in self.modules.items():
            for switch in summary.switches:
                table = self.methods if switch.kind == "method" else self.keys
                if switch.kind in ("method", "key"):
                    table.setdefault(switch.function or switch.name, []).append(
                        (switch, self.shown(path))
                    )
        offered = {
            n.partition(".")[0]  # ``Class.method``: the class is what is imported
            for s in self.modules.values()
            for n in (*s.helpers, *_callables(s))
        }
        # Only the re-exports of a name some module offers can change a finding.
        relevant = {p: _relevant(s, offered) for p, s in self.modules.items() if s != EMPTY}
        facts = [(p, s.to_json()) for p, s in relevant.items() if s != EMPTY]
        text = json.dumps(facts, default=list)
        # changes when any module's summary does, and only then
        self.digest = blake2b(text.encode(), digest_size=8).hexdigest()
        # what can be imported (helpers, switches of functions and classes), and what is
        # matched by name (methods' switches, attributes and config keys)
        importable = sorted(self._importable_names(offered))
        self.importable = bool(importable)
        self._importable = frozenset(importable)
        self._named = frozenset({*self.methods, *self.keys})
        self._targets = _module_suffixes(p for p, s in relevant.items() if s != EMPTY)

    @property
    def has_facts(self) -> bool:
        return bool(self._importable or self._named)

    def shown(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def view(self, path: Path, source: str, imports: list | None = None) -> View:
        """What ``source`` (the text of ``path``) sees of the project: only its import
        statements are parsed (``imports``: their bindings, when already read), and the
        names matched across the project are screened by a word search first, made only
        when some import reaches a module with facts, or names are matched by word."""
        words: set[str] | None = None

        def found() -> set[str]:  # one scan for the words of the text, made at most once
            nonlocal words
            if words is None:
                words = set(_WORD.findall(source)) & (self._named | self._importable)
            return words

        helpers: dict[str, Helper] = {}
        calls: dict[str, list[Route]] = {}
        absolute = path.absolute().as_posix()
        directory = absolute.rpartition("/")[0]
        own = self.modules.get(absolute)
        if own is not None:  # its own functions and classes, called in the same file
            for name, switches in _callables(own).items():
                if f"{name}(" in source:
                    calls.setdefault(name, []).extend((s, self.shown(absolute)) for s in switches)
        if imports is None:
            imports = import_bindings(source) if found() & self._importable else []
        # the imports that bring in something: a helper, or a function or class with a
        # switch (any, for a module imported whole); the others add nothing below
        reached = [
            (local, *found_at)
            for local, module, attribute in imports
            if module.lstrip(".").replace(".", "/") in self._targets
            and (target := self._module_file(directory, module)) is not None
            and (found_at := self._handed_on(target, attribute)) is not None
            and _offers(self.modules[found_at[0]], found_at[1])
        ]
        mentions = bool(reached) and (
            self._named_in_import(source, reached) or bool(found() & self._importable)
        )
        for local, target, attribute in reached if mentions else ():
            summary = self.modules[target]
            where = self.shown(target)
            if attribute is None:  # ``import pkg.mod as m``: ``m.f(...)``
                for name, switches in _callables(summary).items():
                    calls.setdefault(f"{local}.{name}", []).extend((s, where) for s in switches)
                continue
            if attribute in summary.helpers:
                helpers[local] = summary.helpers[attribute]
            if _subclassed(source, local):  # ``class Trainer(Base)``: ``self.method(...)``
                helpers.update(_methods(summary, attribute))
            switches = _callables(summary).get(attribute, [])
            if switches:
                calls.setdefault(local, []).extend((s, where) for s in switches)
        if helpers and not could_hold_finding(source):
            # without trigger text nothing is left to excuse: a raising helper changes
            # no finding there, and would only send the file through the engine
            helpers = {k: h for k, h in helpers.items() if h.tests or h.cleans}
        named = found() if self._named else set()
        return View(
            helpers,
            {k: tuple(v) for k, v in calls.items()},
            {k: tuple(v) for k, v in self.methods.items() if k in named},
            {k: tuple(v) for k, v in self.keys.items() if k in named},
        )

    def _named_in_import(self, source: str, reached: list[tuple[str, str, str | None]]) -> bool:
        """Does ``source`` hold one of the names the project's modules offer as a word,
        found among the names of its own import statements? (Those are words of the
        text, so this answers the word scan's question without the scan; when it finds
        none, the scan still runs.)"""
        for local, _, attribute in reached:
            for name in (local, attribute):
                if name in self._importable and _whole_word(source, name):
                    return True
        return False

    def _importable_names(self, offered: set[str]) -> set[str]:
        """The names the project's modules offer (helpers, functions and classes with a
        switch), and those packages' ``__init__`` modules hand on that reach one."""
        names = set(offered)
        for path, summary in self.modules.items():
            for name, (_, attribute) in summary.reexports.items():
                if attribute not in offered:
                    continue  # most re-exports hand on names with no fact
                found_at = self._handed_on(path, name)
                if found_at is not None and found_at[0] != path:
                    if _offers(self.modules[found_at[0]], found_at[1]):
                        names.add(name)
        return names

    def _handed_on(self, target: str, attribute: str | None) -> tuple[str, str | None] | None:
        """Where ``attribute`` of module ``target`` is defined: a package ``__init__``
        that imports it from one of its modules hands it on (a few hops at most)."""
        for _ in range(4):
            hop = self.modules[target].reexports.get(attribute) if attribute else None
            if hop is None:
                return target, attribute
            inner = self._module_file(target.rpartition("/")[0], hop[0])
            if inner is None:
                return None
            target, attribute = inner, hop[1]
        return None

    def _module_file(self, directory: str, module: str) -> str | None:
        """The project file a dotted module name (``.`` first: relative) stands for, in a
        module of ``directory`` (absolute, POSIX)."""
        level = len(module) - len(module.lstrip("."))
        dotted = module[level:].replace(".", "/")
        if level:
            bases = [directory.rsplit("/", level - 1)[0] if level > 1 else directory]
        else:
            root = self.root.as_posix()
            bases = [directory, root, f"{root}/src"]
        for base in bases:
            stem = f"{base}/{dotted}" if dotted else base
            for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
                if candidate in self.paths:
                    return candidate
        return None


def _relevant(summary: Summary, offered: set[str]) -> Summary:
    """``summary`` keeping only the re-exports of a name that some module offers."""
    if not summary.reexports:
        return summary
    kept = {k: v for k, v in summary.reexports.items() if v[1] in offered}
    if len(kept) == len(summary.reexports):
        return summary
    return Summary(summary.helpers, summary.switches, kept)


def _module_suffixes(paths: Iterable[str]) -> frozenset[str]:
    """Every ``a/b`` a dotted module name (``a.b``, ``.b``) must end with to reach one of
    ``paths``: ``_module_file`` tries ``{base}/{dotted}.py`` and
    ``{base}/{dotted}/__init__.py``, so a name without such an ending reaches none of them
    (the empty name, a package's own ``__init__``, is always tried)."""
    found = {""}
    for path in paths:
        if not path.endswith(".py"):  # a stub (``.pyi``) is never what an import reaches
            continue
        parts = path[: -len(".py")].split("/")
        for end in (len(parts), len(parts) - 1 if parts[-1] == "__init__" else 0):
            found.update("/".join(parts[start:end]) for start in range(1, end))
    return frozenset(found)


def _offers(summary: Summary, attribute: str | None) -> bool:
    """Does importing ``attribute`` of a module (None: the module itself) bring in a
    helper (a function, or a class with helper methods) or a switch?"""
    if attribute is None:
        return any(switch.kind == "param" for switch in summary.switches)
    in_class = f"{attribute}."
    return (
        attribute in summary.helpers
        or attribute in _callables(summary)
        or any(name.startswith(in_class) for name in summary.helpers)
    )


def _methods(summary: Summary, cls: str) -> dict[str, Helper]:
    """The helper methods of the class ``cls``, under the names a subclass calls them by
    (``self._sanitize_logits``)."""
    in_class = f"{cls}."
    return {
        f"self.{name.removeprefix(in_class)}": helper
        for name, helper in summary.helpers.items()
        if name.startswith(in_class)
    }


def _subclassed(source: str, local: str) -> bool:
    """Does ``source`` define a class with ``local`` among its bases?"""
    return any(
        re.search(rf"(?<![\w.]){re.escape(local)}\b", bases)
        for bases in _CLASS_BASES.findall(source)
    )


_CLASS_BASES = re.compile(r"^[ \t]*class\s+\w+\s*\(([^)]*)\)", re.MULTILINE)


def _callables(summary: Summary) -> dict[str, list[Switch]]:
    found: dict[str, list[Switch]] = {}
    for switch in summary.switches:
        if switch.kind == "param":
            found.setdefault(switch.function, []).append(switch)
    return found


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _whole_word(source: str, name: str) -> bool:
    """Is ``name`` one of the words ``_WORD`` finds in ``source``? True when it occurs
    with no ``_WORD`` character on either side (then the scan finds it there); False
    means not found that way, though the scan might (a word glued to digits before it)."""
    if not (name.isascii() and _WORD.fullmatch(name)):
        return False
    at = source.find(name)
    while at >= 0:
        end = at + len(name)
        if (at == 0 or source[at - 1] not in _WORD_CHARS) and (
            end == len(source) or source[end] not in _WORD_CHARS
        ):
            return True
        at = source.find(name, at + 1)
    return False


_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import\b|import[ \t]+\w)", re.MULTILINE)


def import_bindings(source: str) -> list[tuple[str, str, str | None]]:
    """(local name, module, attribute or None) for each name an import statement binds,
    the statements found by their first words and parsed together (cheaper than the
    file; one by one, skipping those that do not parse, when together they do not)."""
    pieces = []
    for start in _import_starts(source):
        end = source.find("\n", start)
        text = source[start : len(source) if end < 0 else end]
        while (text.rstrip().endswith("\\") or text.count("(") > text.count(")")) and end >= 0:
            following = source.find("\n", end + 1)
            text = source[start : len(source) if following < 0 else following]
            end = following
        pieces.append(text.strip())
    joined = "\n".join(pieces)
    # Together, pieces that each parse read as they do alone; a triple-quoted string
    # opened in one piece could swallow the next ones, so such text is parsed piecewise.
    if '"""' in joined or "'''" in joined:
        return [bound for piece in pieces for node in _parsed(piece) for bound in _bound(node)]
    try:
        statements = ast.parse(joined).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        statements = [node for piece in pieces for node in _parsed(piece)]
    return [bound for node in statements for bound in _bound(node)]


def _import_starts(source: str) -> Iterator[int]:
    """Where each line that ``_IMPORT`` matches starts: only lines holding ``import``
    are tried (the pattern tried at every position costs more than the parse)."""
    at = source.find("import")
    while at >= 0:
        line_start = source.rfind("\n", 0, at) + 1
        line_end = source.find("\n", at)
        if _IMPORT.match(source, line_start):
            yield line_start
        if line_end < 0:
            return
        at = source.find("import", line_end)


def _parsed(piece: str) -> list[ast.stmt]:
    try:
        return ast.parse(piece).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []


def _bound(node: ast.stmt) -> list[tuple[str, str, str | None]]:
    found: list[tuple[str, str, str | None]] = []
    if isinstance(node, ast.Import):
        found += [(a.asname or a.name, a.name, None) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                continue
            local = alias.asname or alias.name
            found.append((local, module, alias.name))  # a function or class of the module
            joined = f"{module}{alias.name}" if not module.strip(".") else f"{module}.{alias.name}"
            found.append((local, joined, None))  # or a module of the package
    return found


class Projects:
    """The projects of the files one run lints, each summarised once.

    A file with no project marker above it (a tarball's tree, a folder of scripts) belongs
    to ``fallback``, the directory the run was started on, when it lies under it: its
    modules import each other there as they would in a checkout."""

    def __init__(
        self, cache_directory: Path | None, mapper: Mapper = _serial, fallback: Path | None = None
    ) -> None:
        self.store = SummaryStore(cache_directory)
        self.mapper = mapper
        self.fallback = fallback.absolute() if fallback and fallback.is_dir() else None
        self._by_root: dict[Path, Project] = {}
        self._roots: dict[Path, Path | None] = {}

    def of(self, file: Path) -> Project | None:
        """The project ``file`` belongs to, summarised on first use (None: none)."""
        directory = file.absolute().parent
        if directory not in self._roots:
            root = project_root(file.absolute())
            if root is None and self.fallback and directory.is_relative_to(self.fallback):
                root = self.fallback
            self._roots[directory] = root
        root = self._roots[directory]
        if root is None:
            return None
        if root not in self._by_root:
            self._by_root[root] = Project(root, self.store, self.mapper)
        return self._by_root[root]

    def known(self) -> list[Project]:
        return list(self._by_root.values())

    def save(self) -> None:
        self.store.save()
