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
import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nozero.lint.cache import RACY_WINDOW_NS, code_fingerprint, write_json_atomically
from nozero.lint.files import FileFinder
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
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class SummaryStore:
    """Summaries by content hash, and each module's stat fingerprint, in one JSON file."""

    def __init__(self, directory: Path | None) -> None:
        self.file = directory / f"project-{code_fingerprint()[:16]}.json" if directory else None
        self.started_ns = time.time_ns()
        self.dirty = False
        self.files: dict[str, list] = {}
        self.summaries: dict[str, list] = {}
        if self.file is None:
            return
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
            self.files, self.summaries = data["files"], data["summaries"]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a missing or damaged store only costs time

    def summary(self, path: str, stat: os.stat_result | None) -> Summary:
        entry = self.files.get(path)
        if stat is not None and entry and entry[:2] == [stat.st_size, stat.st_mtime_ns]:
            cached = self.summaries.get(entry[2])
            if cached is not None:
                return Summary.from_json(cached)
        try:
            data = Path(path).read_bytes()
        except OSError:
            return EMPTY
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        cached = self.summaries.get(digest)
        if cached is None:
            try:
                source = data.decode("utf-8")
            except UnicodeDecodeError:
                source = ""
            found = summarize(source, path) if source else EMPTY
            cached = self.summaries[digest] = found.to_json()
            self.dirty = True
        if stat is not None:
            trusted = self.started_ns - stat.st_mtime_ns >= RACY_WINDOW_NS
            record = [stat.st_size, stat.st_mtime_ns, digest] if trusted else [-1, -1, digest]
            if entry != record:
                self.files[path] = record
                self.dirty = True
        return Summary.from_json(cached)

    def save(self) -> None:
        if not (self.dirty and self.file):
            return
        used = {entry[2] for entry in self.files.values()}
        summaries = {d: s for d, s in self.summaries.items() if d in used}
        write_json_atomically(self.file, {"files": self.files, "summaries": summaries})
        self.dirty = False


class Project:
    """The summaries of every module under ``root``."""

    def __init__(self, root: Path, store: SummaryStore) -> None:
        self.root = root
        self.modules: dict[str, Summary] = {}
        for shown in FileFinder([]).find([root]):
            absolute = shown.as_posix()
            try:
                stat = os.stat(absolute)
            except OSError:
                continue
            summary = store.summary(absolute, stat)
            self.modules[absolute] = summary
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
        facts = sorted((p, s.to_json()) for p, s in self.modules.items() if s != EMPTY)
        text = json.dumps(facts, default=list)
        # changes when any module's summary does, and only then
        self.digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        names = {n for s in self.modules.values() for n in (*s.helpers, *_callables(s))}
        names |= set(self.methods) | set(self.keys)
        pattern = "|".join(re.escape(name) for name in sorted(names))
        self._mentions = re.compile(rf"\b(?:{pattern})\b") if names else None

    @property
    def has_facts(self) -> bool:
        return self._mentions is not None

    def shown(self, path: str) -> str:
        return os.path.relpath(path, self.root)

    def view(self, path: Path, source: str) -> View:
        """What ``source`` (the text of ``path``) sees of the project."""
        if self._mentions is None or not self._mentions.search(source):
            return View()
        words = set(self._mentions.findall(source))
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return View()
        helpers: dict[str, Helper] = {}
        calls: dict[str, list[Route]] = {}
        absolute = path.absolute().as_posix()
        own = self.modules.get(absolute)
        if own is not None:  # its own functions and classes, called in the same file
            for name, switches in _callables(own).items():
                calls.setdefault(name, []).extend((s, self.shown(absolute)) for s in switches)
        for local, module, attribute in _imports(tree):
            target = self._module_file(path, module)
            if target is None:
                continue
            summary = self.modules[target]
            where = self.shown(target)
            if attribute is None:  # ``import pkg.mod as m``: ``m.f(...)``
                for name, switches in _callables(summary).items():
                    calls.setdefault(f"{local}.{name}", []).extend((s, where) for s in switches)
                continue
            if attribute in summary.helpers and local in words:
                helpers[local] = summary.helpers[attribute]
            switches = _callables(summary).get(attribute, [])
            if switches:
                calls.setdefault(local, []).extend((s, where) for s in switches)
        return View(
            helpers,
            {k: tuple(v) for k, v in calls.items()},
            {k: tuple(v) for k, v in self.methods.items() if k in words},
            {k: tuple(v) for k, v in self.keys.items() if k in words},
        )

    def _module_file(self, path: Path, module: str) -> str | None:
        """The project file a dotted module name (``.`` first: relative) stands for."""
        level = len(module) - len(module.lstrip("."))
        dotted = module[level:].replace(".", "/")
        if level:
            base = path.absolute().parents[level - 1]
            bases = [base]
        else:
            bases = [path.absolute().parent, self.root, self.root / "src"]
        for base in bases:
            stem = (base / dotted).as_posix() if dotted else base.as_posix()
            for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
                if candidate in self.paths:
                    return candidate
        return None


def _callables(summary: Summary) -> dict[str, list[Switch]]:
    found: dict[str, list[Switch]] = {}
    for switch in summary.switches:
        if switch.kind == "param":
            found.setdefault(switch.function, []).append(switch)
    return found


def _imports(tree: ast.Module) -> list[tuple[str, str, str | None]]:
    """(local name, module, attribute or None) for each name an import binds."""
    found: list[tuple[str, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.asname or a.name, a.name, None) for a in node.names if a.asname]
            found += [(a.name, a.name, None) for a in node.names if not a.asname]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name == "*":
                    continue
                local = alias.asname or alias.name
                found.append((local, module, alias.name))
                if not module.strip("."):  # ``from . import mod``
                    found.append((local, f"{module}{alias.name}", None))
                else:
                    found.append((local, f"{module}.{alias.name}", None))
    return found


class Projects:
    """The projects of the files one run lints, each summarised once."""

    def __init__(self, cache_directory: Path | None) -> None:
        self.store = SummaryStore(cache_directory)
        self._by_root: dict[Path, Project] = {}
        self._roots: dict[Path, Path | None] = {}

    def of(self, file: Path) -> Project | None:
        """The project ``file`` belongs to, summarised on first use (None: none)."""
        directory = file.absolute().parent
        if directory not in self._roots:
            self._roots[directory] = project_root(file.absolute())
        root = self._roots[directory]
        if root is None:
            return None
        if root not in self._by_root:
            self._by_root[root] = Project(root, self.store)
        return self._by_root[root]

    def known(self) -> list[Project]:
        return list(self._by_root.values())

    def save(self) -> None:
        self.store.save()
