"""Which files to lint: directory walks that honour ``.gitignore`` and configured excludes.

The gitignore matching is written here rather than taken from ``pathspec`` because the
base install (what the pre-commit hook pulls) must stay libcst only. It covers what
``.gitignore`` files use: comments, ``!`` negation, ``/`` anchoring, trailing ``/`` for
directories, ``*``, ``?``, ``[...]`` classes and ``**``. The same matcher serves the
``exclude`` and ``per-file-ignores`` globs of the configuration.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# Directories nobody wants linted; ``exclude`` replaces this list, ``extend-exclude`` adds.
DEFAULT_EXCLUDE: tuple[str, ...] = (
    ".bzr",
    ".direnv",
    ".eggs",
    ".git",
    ".hg",
    ".mypy_cache",
    ".nox",
    ".nozero_cache",
    ".pytest_cache",
    ".pytype",
    ".ruff_cache",
    ".svn",
    ".tox",
    ".venv",
    "__pycache__",
    "__pypackages__",
    "_build",
    "buck-out",
    "build",
    "dist",
    "node_modules",
    "venv",
)

PYTHON_SUFFIXES = (".py", ".pyi")


@dataclass(frozen=True)
class Pattern:
    """One gitignore-style pattern, anchored at ``base`` (the directory that declared it)."""

    base: str  # absolute, posix, ends with "/"
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool
    anchored: bool  # False: the pattern names an entry at any depth (tested on the basename)

    def matches(self, path: str, is_dir: bool) -> bool:
        """``path`` is absolute and posix-style."""
        if (self.dir_only and not is_dir) or not path.startswith(self.base):
            return False
        tested = path[len(self.base) :] if self.anchored else path.rpartition("/")[2]
        return self.regex.fullmatch(tested) is not None


def is_test_module(path: str) -> bool:
    """Is ``path`` a test module by pytest's default names (``test_*.py``, ``*_test.py``,
    ``conftest.py``)? Nothing in one trains: it exercises the code that does."""
    name = os.path.basename(path)
    return name == "conftest.py" or (
        name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    )


def compile_pattern(line: str, base: Path) -> Pattern | None:
    """A gitignore line as a :class:`Pattern`, or None for blanks and comments."""
    text = line.rstrip("\n")
    if not text.endswith("\\ "):
        text = text.rstrip(" ")
    if not text or text.startswith("#"):
        return None
    negated = text.startswith("!")
    if negated or text.startswith(("\\!", "\\#")):
        text = text[1:]
    dir_only = text.endswith("/")
    text = text.rstrip("/")
    if not text:
        return None
    # A slash at the start or in the middle anchors the pattern to ``base``; otherwise it
    # matches an entry of that name at any depth.
    anchored = "/" in text
    regex = re.compile(_glob_to_regex(text.lstrip("/")), re.DOTALL)
    return Pattern(base.as_posix().rstrip("/") + "/", regex, negated, dir_only, anchored)


def _glob_to_regex(glob: str) -> str:
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        char = glob[i]
        if glob.startswith("**/", i) and (i == 0 or glob[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i) and i + 2 == n and (i == 0 or glob[i - 1] == "/"):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            # A "]" right after "[" or "[!" is a member of the class, not its end.
            first = i + 2 if glob.startswith(("[!", "[^"), i) else i + 1
            end = glob.find("]", first + 1)
            if end == -1:
                out.append(re.escape(char))
                i += 1
                continue
            inner = glob[i + 1 : end]
            if inner[:1] in ("!", "^"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        elif char == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(char))
            i += 1
    return "".join(out)


def compile_patterns(lines: Iterable[str], base: Path) -> list[Pattern]:
    return [p for line in lines if (p := compile_pattern(line, base)) is not None]


def is_ignored(patterns: Sequence[Pattern], path: str, is_dir: bool) -> bool:
    """Git's rule: the last matching pattern decides; ``!`` re-includes."""
    ignored = False
    for pattern in patterns:
        if pattern.negated == ignored and pattern.matches(path, is_dir):
            ignored = not pattern.negated
    return ignored


def _read_gitignore(directory: Path) -> list[Pattern]:
    try:
        text = (directory / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return compile_patterns(text.splitlines(), directory)


def git_root(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def _enclosing_gitignores(directory: Path) -> list[Pattern]:
    """The ``.gitignore`` patterns of the repository around ``directory``, outermost
    first, from its root down to (not including) ``directory`` itself."""
    root = git_root(directory)
    if root is None or root == directory:
        return []
    patterns: list[Pattern] = []
    for parent in reversed(directory.relative_to(root).parents):
        patterns += _read_gitignore(root / parent)
    return patterns


class FileFinder:
    """Finds the Python files under the paths given on the command line.

    ``exclude`` patterns (anchored at the project root) apply to everything a walk finds
    and to files named on the command line, so a pre-commit run honours them; a named
    file they drop is kept in ``excluded_by_name`` for the caller to report. For a
    directory named on the command line only what lies below it is tested: naming it is a
    request to lint it. ``.gitignore`` files apply to what a walk finds.
    """

    def __init__(self, exclude: Sequence[Pattern], respect_gitignore: bool = True) -> None:
        self.exclude = list(exclude)
        self._excluded = _Excludes(self.exclude)
        self.respect_gitignore = respect_gitignore
        self.excluded_by_name: list[Path] = []
        self.visited: list[str] = []  # the directories a walk read (absolute)

    def find(self, paths: Iterable[Path]) -> Iterator[Path]:
        """Python files to lint, as the user would name them, each once, in walk order.

        Raises FileNotFoundError for a path that does not exist.
        """
        seen: set[str] = set()
        for given in paths:
            for shown, absolute in self._find_one(given):
                if absolute not in seen:
                    seen.add(absolute)
                    yield shown

    def _find_one(self, given: Path) -> Iterator[tuple[Path, str]]:
        absolute = given.resolve()
        if absolute.is_dir():
            inherited = _enclosing_gitignores(absolute) if self.respect_gitignore else []
            yield from self._walk(given, absolute.as_posix(), inherited)
        elif absolute.exists():
            if not self._named_file_excluded(absolute):
                yield given, absolute.as_posix()
            elif given not in self.excluded_by_name:
                self.excluded_by_name.append(given)
        else:
            raise FileNotFoundError(f"{given}: no such file or directory")

    def _walk(
        self,
        shown: Path,
        absolute: str,
        gitignores: list[Pattern],
        above: frozenset[tuple[int, int]] = frozenset(),
    ) -> Iterator[tuple[Path, str]]:
        try:
            own = os.stat(absolute)
            entries = sorted(os.scandir(absolute), key=lambda entry: entry.name)
        except OSError:
            return
        identity = (own.st_dev, own.st_ino)
        if identity in above:
            return  # a symlink back to a directory above it: walking on would never end
        above = above | {identity}
        if self.respect_gitignore:
            gitignores = gitignores + _read_gitignore(Path(absolute))
        self.visited.append(absolute)
        for entry in entries:
            child = f"{absolute}/{entry.name}"
            try:
                is_dir = entry.is_dir()
            except OSError:  # a dangling or looping link
                continue
            if not (is_dir or entry.name.endswith(PYTHON_SUFFIXES)):
                continue  # never linted, whatever the patterns say
            if self._excluded(child, is_dir) or is_ignored(gitignores, child, is_dir):
                continue
            if is_dir:
                yield from self._walk(shown / entry.name, child, gitignores, above)
            elif entry.name.endswith(PYTHON_SUFFIXES) and entry.is_file():
                yield shown / entry.name, child

    def _named_file_excluded(self, absolute: Path) -> bool:
        return covers(self.exclude, absolute)


class _Excludes:
    """``is_ignored(patterns, path, is_dir)``, with the plain names (``.git``, ``build``,
    most of the default list) looked up in a set: a walk asks for every entry it meets.
    Only without ``!`` patterns, where any match decides and the order does not count."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self.patterns = list(patterns)
        self.ordered = any(p.negated for p in self.patterns)
        self.names: dict[str, tuple[set[str], set[str]]] = {}  # base -> (any, directories)
        self.others: list[Pattern] = []
        for pattern in [] if self.ordered else self.patterns:
            name = _literal(pattern)
            if name is None or pattern.anchored:
                self.others.append(pattern)
                continue
            anywhere, directories = self.names.setdefault(pattern.base, (set(), set()))
            (directories if pattern.dir_only else anywhere).add(name)

    def __call__(self, path: str, is_dir: bool) -> bool:
        if self.ordered:
            return is_ignored(self.patterns, path, is_dir)
        name = path.rpartition("/")[2]
        for base, (anywhere, directories) in self.names.items():
            if (name in anywhere or (is_dir and name in directories)) and path.startswith(base):
                return True
        return any(pattern.matches(path, is_dir) for pattern in self.others)


def _literal(pattern: Pattern) -> str | None:
    """The name a pattern matches when it holds no wildcard, else None."""
    name = re.sub(r"\\(.)", r"\1", pattern.regex.pattern, flags=re.DOTALL)
    return name if re.escape(name) == pattern.regex.pattern else None


def covers(patterns: Sequence[Pattern], file: Path) -> bool:
    """Whether ``patterns`` match the absolute ``file`` or one of its directories, so
    ``generated/`` covers ``generated/a.py`` when the file is named on its own."""
    if is_ignored(patterns, file.as_posix(), False):
        return True
    return any(is_ignored(patterns, parent.as_posix(), True) for parent in file.parents)
