"""``[tool.nozero]`` in ``pyproject.toml``: finding it, validating it, and the effective
set of enabled codes it yields together with the command line."""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nozero.lint.files import DEFAULT_EXCLUDE, Pattern, compile_patterns, covers, git_root

KNOWN_KEYS = ("select", "ignore", "per-file-ignores", "exclude", "extend-exclude")


class ConfigError(Exception):
    """A bad setting; the message names the file and the key (or the option)."""


@dataclass(frozen=True)
class Settings:
    """The project's settings as written, before codes are checked against the rules."""

    project_root: Path
    config_file: Path | None = None
    select: tuple[str, ...] | None = None  # None: the rules enabled by default
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()

    def where(self, key: str) -> str:
        """How an error message names a setting."""
        return f"[tool.nozero] {key} in {self.config_file}"

    def exclude_source(self) -> str:
        """Where the exclude patterns in force come from, for messages."""
        defaults = self.exclude == DEFAULT_EXCLUDE
        parts = ["the default excludes" if defaults else self.where("exclude")]
        if self.extend_exclude:
            parts.append(self.where("extend-exclude"))
        return " or ".join(parts)

    def exclude_patterns(self) -> list[Pattern]:
        return compile_patterns((*self.exclude, *self.extend_exclude), self.project_root)


@dataclass(frozen=True)
class Selection:
    """Which codes run, and which are dropped for which files."""

    enabled: frozenset[str]
    per_file: tuple[tuple[list[Pattern], frozenset[str]], ...] = field(default=())

    def ignored_for(self, file: Path) -> frozenset[str]:
        """Codes that ``per-file-ignores`` drops for the absolute path ``file``."""
        dropped: set[str] = set()
        for patterns, codes in self.per_file:
            if covers(patterns, file):
                dropped |= codes
        return frozenset(dropped)


def find_config(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that has a ``[tool.nozero]``
    table; those without one are passed over, as ruff does."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and "nozero" in _read_toml(candidate).get("tool", {}):
            return candidate
    return None


def project_root_for(start: Path) -> Path:
    """Where a project without ``[tool.nozero]`` keeps its cache: the nearest directory
    with a ``pyproject.toml``, else the git repository's root, else ``start``."""
    for directory in (start, *start.parents):
        if (directory / "pyproject.toml").is_file():
            return directory
    return git_root(start) or start


def load_settings(start: Path, config_file: Path | None = None) -> Settings:
    """Settings from ``config_file``, or from the nearest configuration above ``start``.

    Every error in the table is reported at once (one ConfigError, one line each): a user
    fixing a configuration should not have to run nozero once per mistake.
    """
    config_file = config_file or find_config(start)
    if config_file is None:
        return Settings(project_root=project_root_for(start))
    config_file = config_file.resolve()
    table = _read_toml(config_file).get("tool", {}).get("nozero", {})
    settings = Settings(project_root=config_file.parent, config_file=config_file)
    if not isinstance(table, dict):
        raise ConfigError(f"{config_file}: [tool.nozero] must be a table")
    errors = [
        f"{config_file}: unknown key {key!r} in [tool.nozero] (known: {', '.join(KNOWN_KEYS)})"
        for key in table
        if key not in KNOWN_KEYS
    ]
    values: dict[str, object] = {}
    for key in ("select", "ignore", "exclude", "extend-exclude"):
        if key in table:
            codes = key in ("select", "ignore")
            value = _string_list(table[key], settings.where(key), errors, codes)
            if value is not None:
                values[key.replace("-", "_")] = value
    if "per-file-ignores" in table:
        values["per_file_ignores"] = _per_file_ignores(table["per-file-ignores"], settings, errors)
    if errors:
        raise ConfigError("\n".join(errors))
    return Settings(project_root=config_file.parent, config_file=config_file, **values)


def select_codes(
    settings: Settings,
    all_codes: Collection[str],
    default_codes: Collection[str],
    cli_select: Sequence[str] | None = None,
    cli_ignore: Sequence[str] = (),
) -> Selection:
    """The enabled codes: ``--select`` replaces the configured ``select``, ``--ignore``
    adds to the configured ``ignore``. Selectors are codes, code prefixes (``NZ1``) or
    ``ALL``; one that names no rule is an error, never a silent no-op."""
    if cli_select is not None:
        chosen = expand(cli_select, all_codes, "--select")
    elif settings.select is not None:
        chosen = expand(settings.select, all_codes, settings.where("select"))
    else:
        chosen = set(default_codes)
    chosen -= expand(settings.ignore, all_codes, settings.where("ignore"))
    chosen -= expand(cli_ignore, all_codes, "--ignore")
    per_file = tuple(
        (
            compile_patterns([glob], settings.project_root),
            frozenset(expand(codes, all_codes, settings.where(f"per-file-ignores {glob!r}"))),
        )
        for glob, codes in settings.per_file_ignores
    )
    return Selection(frozenset(chosen), per_file)


def expand(selectors: Iterable[str], all_codes: Collection[str], where: str) -> set[str]:
    """Codes named by ``selectors``; raises ConfigError naming ``where`` for an unknown one."""
    codes: set[str] = set()
    for selector in selectors:
        selector = selector.strip().upper()
        matched = (
            set(all_codes)
            if selector == "ALL"
            else {c for c in all_codes if c.startswith(selector)}
        )
        if not selector or not matched:
            raise ConfigError(
                f"{where}: unknown rule code {selector!r} (see `nozero rules` for the list)"
            )
        codes |= matched
    return codes


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: invalid TOML: {err}") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err


def _string_list(
    value: object, where: str, errors: list[str], codes: bool = False
) -> tuple[str, ...] | None:
    """``value`` as strings, or None after adding to ``errors`` what is wrong with it
    (with ``codes``, also each string that names no rule)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        errors.append(f"{where}: expected a list of strings, got {value!r}")
        return None
    if codes:
        from nozero.lint.catalog import ALL_CODES  # the catalogue, without the rules

        for selector in value:
            try:
                expand([selector], ALL_CODES, where)
            except ConfigError as err:
                errors.append(str(err))
    return tuple(value)


def _per_file_ignores(
    value: object, settings: Settings, errors: list[str]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(value, dict):
        errors.append(
            f"{settings.where('per-file-ignores')}: expected a table of glob = [codes],"
            f" got {value!r}"
        )
        return ()
    checked = (
        (glob, _string_list(codes, settings.where(f"per-file-ignores {glob!r}"), errors, True))
        for glob, codes in value.items()
    )
    return tuple((glob, codes) for glob, codes in checked if codes is not None)
