"""The ``nozero`` command: ``nozero lint``, ``nozero rules`` and ``nozero rule CODE``.

Exit status: 0 clean, 1 findings (or files that could not be decoded), 2 usage,
configuration or internal error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nozero import __version__

# The output formats' names, spelled here so that ``--help`` needs no lint import.
FORMATS = ("concise", "full", "json", "json-lines", "junit", "gitlab", "github", "sarif")

if TYPE_CHECKING:  # the lint modules are imported by the commands that need them
    from nozero.lint.config import Settings
    from nozero.lint.runner import Report, Runner

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    """Bad command-line input; reported in one line with exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(_reason_only_after_equals(sys.argv[1:] if argv is None else argv))
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
            for line in str(err).splitlines():  # a configuration's errors come all at once
                print(f"nozero: error: {line}", file=sys.stderr)
        else:
            import traceback

            traceback.print_exc()
            print(f"nozero: internal error: {err!r}", file=sys.stderr)
        return EXIT_ERROR


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help text wrapped between words only: ``json-lines`` stays one word.

    The width is found as argparse finds it, without the ``shutil`` import argparse makes
    for it (2 ms of every pre-commit run, help or not)."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        kwargs.setdefault("width", _terminal_columns() - 2)
        super().__init__(prog, **kwargs)

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _terminal_columns() -> int:
    """``$COLUMNS``, else the terminal's width, else 80 (``shutil.get_terminal_size``)."""
    with contextlib.suppress(KeyError, ValueError):
        return int(os.environ["COLUMNS"])
    with contextlib.suppress(AttributeError, ValueError, OSError):
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    return 80


def _reason_only_after_equals(argv: Sequence[str]) -> list[str]:
    """``--add-noqa src/`` lints ``src/``: the reason is given as ``--add-noqa=REASON``
    only, so a bare ``--add-noqa`` never swallows the path after it."""
    args = list(argv)
    end = args.index("--") if "--" in args else len(args)
    return [f"{arg}=" if arg == "--add-noqa" and i < end else arg for i, arg in enumerate(args)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nozero",
        description="Flags code that zeroes, skips or swallows a non-finite loss or gradient.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nozero {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    lint = commands.add_parser(
        "lint",
        help="lint Python files (default: the current directory)",
        description=(
            "Lint Python files for code that zeroes, skips or swallows a non-finite loss or\n"
            "gradient. Exit status: 0 clean, 1 findings, 2 usage, configuration or internal\n"
            "error."
        ),
        epilog=(
            "examples:\n"
            "  nozero lint src/                       lint a tree\n"
            "  nozero lint --output-format full       show each finding's source and a caret\n"
            "  nozero lint --add-noqa='adopted 2026'  suppress today's findings\n"
            "  nozero rule NZ101                      read a rule's page (or: nozero rules)\n"
            "\nSettings come from [tool.nozero] in the nearest pyproject.toml."
        ),
        formatter_class=_HelpFormatter,
    )
    lint.add_argument(
        "paths", nargs="*", metavar="PATH", help="files or directories (default: .); - for stdin"
    )
    report = lint.add_argument_group("reporting")
    report.add_argument(
        "--output-format",
        choices=FORMATS,
        metavar="FORMAT",
        help=f"how findings are printed: {', '.join(FORMATS)} (default: concise)",
    )
    report.add_argument(
        "--format",
        choices=(*FORMATS, "text"),
        dest="legacy_format",
        help=argparse.SUPPRESS,  # deprecated: --output-format's old name
    )
    report.add_argument(
        "--statistics",
        action="store_true",
        help="print how many findings each code has instead of the findings",
    )
    report.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no summary line (findings and problems are still printed)",
    )
    report.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when there are findings"
    )
    rules = lint.add_argument_group("rule selection")
    rules.add_argument(
        "--select",
        type=_codes,
        metavar="CODES",
        help="comma-separated codes or prefixes, or ALL; replaces the configured select",
    )
    rules.add_argument(
        "--ignore",
        type=_codes,
        action="extend",
        default=[],
        metavar="CODES",
        help="comma-separated codes or prefixes to leave out",
    )
    suppress = lint.add_argument_group("suppressions")
    suppress.add_argument(
        "--require-reason",
        action="store_true",
        help="a # noqa suppresses only with text after its codes (else NZ002)",
    )
    suppress.add_argument(
        "--add-noqa",
        nargs="?",
        const="",
        metavar="REASON",
        help=(
            "add '# noqa: CODE' to every flagged line, so that the next run is clean (files"
            " change only by those comments); --add-noqa=REASON writes REASON after the code"
        ),
    )
    run = lint.add_argument_group("files and running")
    run.add_argument(
        "--config", type=Path, metavar="FILE", help="a pyproject.toml to use instead of the nearest"
    )
    run.add_argument(
        "--stdin-filename", metavar="PATH", help="the path to report (and configure) stdin as"
    )
    run.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    run.add_argument(
        "--cache-dir", type=Path, metavar="DIR", help="default: .nozero_cache in the project root"
    )
    run.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="worker processes (default: the number of CPUs)",
    )
    lint.set_defaults(handler=_lint)

    rules = commands.add_parser("rules", help="list the rules", formatter_class=_HelpFormatter)
    rules.set_defaults(handler=_rules)
    rule = commands.add_parser(
        "rule", help="print one rule's page, by code or name", formatter_class=_HelpFormatter
    )
    rule.add_argument(
        "code", metavar="RULE", help="a code (NZ101) or a name (nan-to-num-on-signal)"
    )
    rule.set_defaults(handler=_rule)
    return parser


def _codes(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _lint(args: argparse.Namespace) -> int:
    from nozero.lint.files import FileFinder
    from nozero.lint.runner import decode_source

    paths = [Path(p) for p in (args.paths or ["."])]
    reading_stdin = any(str(p) == "-" for p in paths)
    if reading_stdin and len(paths) > 1:
        raise UsageError("'-' (standard input) cannot be combined with other paths")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    args.format = _output_format(args)
    if args.add_noqa is not None:
        _check_add_noqa(args, reading_stdin)
    stdin_name = args.stdin_filename or "<stdin>"
    if reading_stdin:
        paths = [Path(stdin_name) if args.stdin_filename else Path.cwd()]

    settings, runner = _prepare(args, _search_start(paths))
    stdin_text = None
    if reading_stdin:
        data = sys.stdin.buffer.read()
        report = runner.lint_stdin(data, stdin_name)
        with contextlib.suppress(ValueError):  # undecodable: reported as not linted
            stdin_text = decode_source(data)
    else:
        finder = FileFinder(settings.exclude_patterns())
        files = list(finder.find(paths))
        for path in finder.excluded_by_name:
            # Named on the command line but excluded (how pre-commit honours excludes):
            # said, never silently dropped.
            print(
                f"nozero: {path}: excluded by {settings.exclude_source()}; not linted"
                " (name its directory to lint it)",
                file=sys.stderr,
            )
        report = runner.lint_files(files)
    if args.add_noqa is not None:
        return _add_noqa(args, report)
    return _report(args, report, stdin_text)


def _output_format(args: argparse.Namespace) -> str:
    """``--output-format``, or the deprecated ``--format`` (said on stderr), or concise."""
    if args.legacy_format is None:
        return args.output_format or "concise"
    if args.output_format is not None:
        raise UsageError("--format is the old name of --output-format: give only one")
    print("nozero: warning: --format is deprecated; use --output-format", file=sys.stderr)
    return "concise" if args.legacy_format == "text" else args.legacy_format


def _check_add_noqa(args: argparse.Namespace, reading_stdin: bool) -> None:
    if reading_stdin:
        raise UsageError("--add-noqa rewrites files: it cannot be used with - (standard input)")
    if "\n" in args.add_noqa or "\r" in args.add_noqa:
        raise UsageError("--add-noqa's REASON must be one line")
    from nozero.lint.noqa import noqa_comments

    reason = args.add_noqa.strip()
    [written] = noqa_comments(f"x = 1  # noqa: NZ101 {reason}\n").values()
    if reason and (written.codes != {"NZ101"} or written.reason != reason):
        raise UsageError(
            f"--add-noqa's REASON {reason!r} would be read as codes: start it with a word"
            " that does not look like one (letters then digits, such as fp16 or E501)"
        )
    if args.require_reason and not args.add_noqa.strip():
        raise UsageError(
            "--require-reason needs a reason on every # noqa: give one with --add-noqa=REASON"
        )


def _add_noqa(args: argparse.Namespace, report: Report) -> int:
    """Write the comments, say what was done, and exit 1 only for what is left."""
    from nozero.lint.add_noqa import add_noqa

    outcome = add_noqa(report.findings, args.add_noqa.strip())
    for path, message in outcome.failed:
        print(f"nozero: {path}: {message}", file=sys.stderr)
    for finding in outcome.left:
        print(
            f"{finding.path}:{finding.line}:{finding.col}: {finding.code} {finding.message}"
            " (no # noqa added: fix it by hand)"
        )
    for problem in report.problems:
        print(f"nozero: {problem.path}: {problem.message}", file=sys.stderr)
    files = len(outcome.changed)
    print(
        f"nozero: added {outcome.added} noqa comment(s) to {files} file{'s' if files != 1 else ''}",
        file=sys.stderr,
    )
    if any(problem.internal for problem in report.problems):
        return EXIT_ERROR
    left = outcome.left or outcome.failed or report.problems
    return EXIT_FINDINGS if left and not args.exit_zero else EXIT_CLEAN


def _prepare(args: argparse.Namespace, start: Path) -> tuple[Settings, Runner]:
    """Settings, and a runner with its selection and cache."""
    from nozero.lint.cache import Cache, config_key
    from nozero.lint.catalog import ALL_CODES, DEFAULT_CODES
    from nozero.lint.config import load_settings, select_codes
    from nozero.lint.runner import Runner

    settings = load_settings(start, args.config)
    cache_dir = None if args.no_cache else args.cache_dir or settings.project_root / ".nozero_cache"
    selection = select_codes(settings, ALL_CODES, DEFAULT_CODES, args.select, args.ignore)
    cache = None
    if cache_dir is not None:
        cache = Cache(cache_dir, config_key(selection.enabled, args.require_reason))
    runner = Runner(
        selection,
        args.require_reason,
        cache,
        args.jobs,
        _progress_printer(),
        root=settings.project_root,
    )
    return settings, runner


def _report(args: argparse.Namespace, report: Report, stdin_text: str | None) -> int:
    """Print the findings and problems; the exit status they call for."""
    from nozero.lint.catalog import CATALOG
    from nozero.lint.output import STATISTICS_FORMATS, is_text, render, statistics

    if args.statistics:
        if args.format not in STATISTICS_FORMATS:
            raise UsageError(
                f"--statistics prints {', '.join(STATISTICS_FORMATS)}, not {args.format}"
            )
        sys.stdout.write(statistics(report.findings, args.format, CATALOG))
    else:
        source_of = _source_reader(stdin_text)
        sys.stdout.write(render(report.findings, args.format, CATALOG, report.problems, source_of))
    sys.stdout.flush()
    for problem in report.problems:
        print(f"nozero: {problem.path}: {problem.message}", file=sys.stderr)
        if problem.detail:
            print(problem.detail.rstrip("\n"), file=sys.stderr)
    if is_text(args.format) and not args.quiet:
        print(f"nozero: {_summary(report)}", file=sys.stderr)
    if any(problem.internal for problem in report.problems):
        return EXIT_ERROR
    if (report.findings or report.problems) and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _summary(report: Report) -> str:
    checked = f"{report.files} file{'s' if report.files != 1 else ''} checked"
    if not (report.findings or report.problems):
        return f"All checks passed! ({checked})"
    return (
        f"{len(report.findings)} finding(s), {len(report.problems)} file(s) not linted, {checked}"
    )


def _source_reader(stdin_text: str | None) -> Callable[[str], str | None]:
    """The text of a reported path, for the ``full`` format (read when first asked)."""
    from functools import cache

    from nozero.lint.runner import decode_source

    @cache
    def read(path: str) -> str | None:
        if stdin_text is not None:
            return stdin_text
        try:
            return decode_source(Path(path).read_bytes())
        except (OSError, ValueError):
            return None

    return read


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
    from nozero.lint.catalog import CATALOG as infos

    width = max(len(info.name) for info in infos.values())
    print(f"{'code':<6}  {'name':<{width}}  {'default':<7}  message")
    for code in sorted(infos):
        info = infos[code]
        state = "on" if info.default_enabled else "off"
        print(f"{code:<6}  {info.name:<{width}}  {state:<7}  {info.message}")
    return EXIT_CLEAN


def _rule(args: argparse.Namespace) -> int:
    from nozero.lint.catalog import CATALOG

    wanted = args.code.strip()
    by_name = {info.name: info for info in CATALOG.values()}
    info = CATALOG.get(wanted.upper()) or by_name.get(wanted.lower().replace("_", "-"))
    if info is None:
        from difflib import get_close_matches

        close = get_close_matches(wanted.lower(), list(by_name), n=1)
        hint = f"; did you mean {close[0]} ({by_name[close[0]].code})?" if close else ""
        raise UsageError(
            f"unknown rule {args.code!r}: not a code or a name{hint}"
            " (see `nozero rules` for the list)"
        )
    state = "enabled by default" if info.default_enabled else "off by default; enable with --select"
    print(f"{info.code} {info.name} ({state})\n\n{info.message}\n\n{info.doc.strip()}")
    return EXIT_CLEAN


if __name__ == "__main__":
    raise SystemExit(main())
