"""The ``nozero`` command: ``nozero lint``, ``nozero rules`` and ``nozero rule CODE``.

Exit status: 0 clean, 1 findings (or files that could not be decoded), 2 usage,
configuration or internal error.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nozero import __version__

if TYPE_CHECKING:  # the lint modules are imported by the commands that need them
    from nozero.lint.config import Settings
    from nozero.lint.output import RuleInfo
    from nozero.lint.runner import Report, Runner

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """Bad command-line input; reported in one line with exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return args.handler(args)
    except BrokenPipeError:
        # ``nozero lint | head``: the reader left; say nothing more.
        sys.stderr.close()
        return EXIT_FINDINGS
    except UsageError as err:
        print(f"nozero: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as err:  # noqa: BLE001 - the documented exit status for a crash is 2
        from nozero.lint.config import ConfigError

        if isinstance(err, ConfigError | FileNotFoundError):
            print(f"nozero: error: {err}", file=sys.stderr)
        else:
            traceback.print_exc()
            print(f"nozero: internal error: {err!r}", file=sys.stderr)
        return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nozero",
        description="Flags code that zeroes, skips or swallows a non-finite loss or gradient.",
    )
    parser.add_argument("--version", action="version", version=f"nozero {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    lint = commands.add_parser("lint", help="lint Python files (default: the current directory)")
    lint.add_argument("paths", nargs="*", metavar="PATH", help="files or directories; - for stdin")
    lint.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text")
    lint.add_argument("--statistics", action="store_true", help="count findings per code")
    lint.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    lint.add_argument("--select", type=_codes, help="comma-separated codes or prefixes, or ALL;"
                      " replaces the configured select")
    lint.add_argument("--ignore", type=_codes, action="extend", default=[],
                      help="comma-separated codes or prefixes to drop")
    lint.add_argument("--require-reason", action="store_true",
                      help="a # noqa needs text after the code to suppress a finding")
    lint.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    lint.add_argument("--cache-dir", type=Path, help="default: .nozero_cache in the project root")
    lint.add_argument("--stdin-filename", help="the path to report (and configure) stdin as")
    lint.add_argument("--config", type=Path, help="a pyproject.toml to use instead of the nearest")
    lint.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                      help="worker processes (default: the number of CPUs)")
    lint.set_defaults(handler=_lint)

    rules = commands.add_parser("rules", help="list the rules")
    rules.set_defaults(handler=_rules)
    rule = commands.add_parser("rule", help="print one rule's documentation")
    rule.add_argument("code")
    rule.set_defaults(handler=_rule)
    return parser


def _codes(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _lint(args: argparse.Namespace) -> int:
    from nozero.lint.files import FileFinder

    paths = [Path(p) for p in (args.paths or ["."])]
    reading_stdin = any(str(p) == "-" for p in paths)
    if reading_stdin and len(paths) > 1:
        raise UsageError("'-' (standard input) cannot be combined with other paths")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    stdin_name = args.stdin_filename or "<stdin>"
    if reading_stdin:
        paths = [Path(stdin_name) if args.stdin_filename else Path.cwd()]

    settings, runner, infos = _prepare(args, _search_start(paths))
    if reading_stdin:
        report = runner.lint_stdin(sys.stdin.buffer.read(), stdin_name)
    else:
        report = runner.lint_files(list(FileFinder(settings.exclude_patterns()).find(paths)))
    return _report(args, report, infos)


def _prepare(
    args: argparse.Namespace, start: Path
) -> tuple[Settings, Runner, dict[str, RuleInfo]]:
    """Settings, a runner with its selection and cache, and the rules' descriptions."""
    from nozero.lint.cache import Cache, cached_rule_infos, config_key
    from nozero.lint.config import load_settings, select_codes
    from nozero.lint.output import rule_infos
    from nozero.lint.runner import Runner

    settings = load_settings(start, args.config)
    cache_dir = None if args.no_cache else args.cache_dir or settings.project_root / ".nozero_cache"
    infos = rule_infos() if cache_dir is None else cached_rule_infos(cache_dir)
    default_codes = {code for code, info in infos.items() if info.default_enabled}
    selection = select_codes(settings, infos, default_codes, args.select, args.ignore)
    cache = None
    if cache_dir is not None:
        cache = Cache(cache_dir, config_key(selection.enabled, args.require_reason))
    runner = Runner(selection, args.require_reason, cache, args.jobs, _progress_printer())
    return settings, runner, infos


def _report(args: argparse.Namespace, report: Report, infos: dict[str, RuleInfo]) -> int:
    """Print the findings and problems; the exit status they call for."""
    from nozero.lint.output import render, statistics

    show = statistics if args.statistics else render
    sys.stdout.write(show(report.findings, args.format, infos))
    sys.stdout.flush()
    for problem in report.problems:
        print(f"nozero: {problem.path}: {problem.message}", file=sys.stderr)
    if args.format == "text" and (report.findings or report.problems):
        print(
            f"nozero: {len(report.findings)} finding(s), {len(report.problems)} file(s)"
            f" not linted, {report.files} file(s) checked",
            file=sys.stderr,
        )
    if any(problem.internal for problem in report.problems):
        return EXIT_ERROR
    if (report.findings or report.problems) and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _search_start(paths: Sequence[Path]) -> Path:
    """Where the configuration search starts: the deepest directory holding every path."""
    directories = [p.resolve() if p.resolve().is_dir() else p.resolve().parent for p in paths]
    return Path(os.path.commonpath(directories))


def _progress_printer() -> Callable[[int, int], None] | None:
    """Periodic progress lines on a terminal, for runs long enough to wonder about."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        if total >= 200 and (done % 100 == 0 or done == total):
            end = "\n" if done == total else ""
            print(f"\rnozero: linted {done}/{total} files", end=end, file=sys.stderr, flush=True)

    return show


def _rules(args: argparse.Namespace) -> int:
    from nozero.lint.output import rule_infos

    infos = rule_infos()
    width = max(len(info.name) for info in infos.values())
    print(f"{'code':<6}  {'name':<{width}}  {'default':<7}  message")
    for code in sorted(infos):
        info = infos[code]
        state = "on" if info.default_enabled else "off"
        print(f"{code:<6}  {info.name:<{width}}  {state:<7}  {info.message}")
    return EXIT_CLEAN


def _rule(args: argparse.Namespace) -> int:
    from nozero.lint.output import rule_infos

    info = rule_infos().get(args.code.strip().upper())
    if info is None:
        raise UsageError(f"unknown rule code {args.code!r} (see `nozero rules` for the list)")
    state = "enabled by default" if info.default_enabled else "off by default; enable with --select"
    print(f"{info.code} {info.name} ({state})\n\n{info.message}\n\n{info.doc.strip()}")
    return EXIT_CLEAN


if __name__ == "__main__":
    raise SystemExit(main())
