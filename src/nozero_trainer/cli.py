"""``nozero-train``: train, make synthetic data, run the demo, diagnose or plot a run.

Exit status: 0 success, 2 usage error, bad settings/data/checkpoint or a missing extra,
3 non-finite halt, 128 + N when signal N (SIGTERM, SIGINT) ended the run.

The training flags are generated from the fields of ``TrainConfig`` and ``RunOptions``
(name, default and help live on the field), and every subcommand is one entry of
:data:`COMMANDS`. Nothing heavy is imported before a command runs, so ``--help`` and the
checks of every setting work on the base install.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nozero import NonFiniteError
from nozero_trainer.config import (
    Problem,
    RunOptions,
    SettingsError,
    TrainConfig,
    check_settings,
    flag_name,
)
from nozero_trainer.interrupt import RunInterrupted, catch_signals

EXIT_USAGE = 2
EXIT_HALT = 3
EXIT_SIGNAL_BASE = 128  # killed by signal N: exit 128 + N, as shells report it
DESCRIPTION = "train, make synthetic data, run the demo, diagnose or plot a run"

# What a flag's value must look like, by the type its setting converts it with.
EXPECTED = {int: "an integer", float: "a number"}

# The extras a command needs, and a module each one installs.
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("jax", "optax", "pyarrow", "numpy"),
    "plot": ("matplotlib",),
}

# The demo trains a smaller model than the shipped defaults so it finishes in well under a
# minute on two CPU cores; everything else is the real pipeline.
DEMO_DATA = {"rows": 60000, "dim": 512}
DEMO_SETTINGS = {"steps": 2000, "hidden_dims": (512, 256), "batch_size": 256}


# --- flags from dataclass fields ------------------------------------------------------------


def _shown_default(field: dataclasses.Field, default: Any) -> str:
    shown = field.metadata.get("shown")
    if shown is not None and default == field.default:
        return shown
    if isinstance(default, tuple):
        return ",".join(map(str, default)) or "none"
    return str(default)


def add_setting_flags(
    parser: argparse.ArgumentParser, settings: type, overrides: Mapping[str, Any] | None = None
) -> None:
    """One flag per field of the dataclass ``settings`` that has ``setting()`` metadata.

    Values stay text here and are converted by :func:`settings_from_args`, so every bad
    value of a command line is reported at once rather than the first one only.
    """
    overrides = dict(overrides or {})
    for field in dataclasses.fields(settings):
        if not field.metadata.get("flag"):
            continue
        default = overrides.get(field.name, field.default)
        help_text = field.metadata["help"]
        if isinstance(field.default, bool):
            on = not default
            flag = flag_name(field.name) if on else "--no-" + field.name.replace("_", "-")
            # A --no- flag says what it does, not what the setting it turns off does.
            parser.add_argument(
                flag,
                dest=field.name,
                action="store_true" if on else "store_false",
                default=default,
                help=f"{help_text} (default: off)"
                if on
                else field.metadata.get("off_help") or f"do not {help_text} (default: do)",
            )
            continue
        parser.add_argument(
            flag_name(field.name),
            dest=field.name,
            default=default,
            choices=field.metadata.get("choices"),
            help=f"{help_text} (default: {_shown_default(field, default)})",
        )


def _parser_of(field: dataclasses.Field) -> Callable[[str], Any]:
    parse = field.metadata.get("parse")
    if parse is not None:
        return parse
    kind = type(field.default)
    return float if kind is float else kind


def settings_from_args(settings: type, args: argparse.Namespace) -> tuple[Any, list[Problem]]:
    """Build ``settings`` from the parsed flags; problems for values that do not convert."""
    values, problems = {}, []
    for field in dataclasses.fields(settings):
        if not field.metadata.get("flag") or not hasattr(args, field.name):
            continue
        value = getattr(args, field.name)
        if isinstance(value, str) and not isinstance(field.default, str):
            parse = _parser_of(field)
            try:
                value = parse(value)
            except ValueError as err:
                expected = EXPECTED.get(parse)
                message = f"expected {expected}, got {value!r}" if expected else str(err)
                problems.append(Problem(field.name, message))
                continue
        values[field.name] = value
    return settings(**values), problems


def _config_and_options(args: argparse.Namespace) -> tuple[TrainConfig, RunOptions]:
    """The run's settings, or a ``SettingsError`` listing every bad one (nothing touched)."""
    config, problems = settings_from_args(TrainConfig, args)
    options, more = settings_from_args(RunOptions, args)
    problems += more + check_settings(config) + options.problems()
    data = getattr(args, "data", None)
    if data is not None and not Path(data).is_dir():
        problems.append(Problem("data", f"{data}: data directory does not exist"))
    if problems:
        raise SettingsError(problems)
    return config, options


# --- commands -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: its flags, what it runs, and the extras it needs installed."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    extras: tuple[str, ...] = ("train",)


def _configure_train(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        required=True,
        help="a directory holding train/ and holdout/ parquet shards",
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the run directory (created once every setting is checked)",
    )
    add_setting_flags(parser, TrainConfig)
    add_setting_flags(parser, RunOptions)


def _train(args: argparse.Namespace) -> int:
    config, options = _config_and_options(args)
    from nozero_trainer.evaluation import format_evaluation
    from nozero_trainer.runner import run_training

    summary = run_training(config, args.data, args.out, options=options)
    print(format_evaluation(summary.evaluation))
    if summary.holdout_scores is not None:
        print(f"holdout scores: {summary.holdout_scores}")
    print(f"run directory: {summary.out_dir}")
    print(f"finished at step {summary.state.step} after {summary.restarts} restart(s)")
    return 0


def _configure_make_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", type=Path, help="directory to create (train/ and holdout/)")
    parser.add_argument("--rows", type=int, required=True, help="rows in all, at least 10")
    parser.add_argument("--dim", type=int, required=True, help="embedding width, at least 1")
    parser.add_argument("--seed", type=int, default=0, help="(default: 0)")
    parser.add_argument("--shards", type=int, default=4, help="shards per split (default: 4)")


# make-data's and demo's own flags: (flag's setting, smallest value, why).
DATA_FLAG_LIMITS = (("rows", 10, "rows in all"), ("dim", 1, "embedding width"))


def _check_data_flags(args: argparse.Namespace) -> None:
    """Refuse every out-of-range data flag at once, by its flag (nothing is written)."""
    limits = DATA_FLAG_LIMITS + ((("shards", 1, "shards per split"),) if "shards" in args else ())
    problems = [
        Problem(name, f"must be at least {low} ({what}), got {getattr(args, name)}")
        for name, low, what in limits
        if getattr(args, name) < low
    ]
    if problems:
        raise SettingsError(problems)


def _make_data(args: argparse.Namespace) -> int:
    _check_data_flags(args)
    from nozero_trainer.synthetic import make_data

    out = make_data(args.out, args.rows, args.dim, args.seed, shards=args.shards)
    print(f"wrote {out}/train and {out}/holdout")
    return 0


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rows",
        type=int,
        default=DEMO_DATA["rows"],
        help=f"synthetic rows (default: {DEMO_DATA['rows']})",
    )
    parser.add_argument(
        "--dim",
        type=int,
        default=DEMO_DATA["dim"],
        help=f"embedding width (default: {DEMO_DATA['dim']})",
    )
    add_setting_flags(parser, TrainConfig, DEMO_SETTINGS)
    parser.add_argument(
        "--out", type=Path, help="keep the run directory here (default: a temporary one, removed)"
    )


def _demo(args: argparse.Namespace) -> int:
    _check_data_flags(args)
    config, _ = _config_and_options(args)
    from nozero_trainer.evaluation import format_evaluation
    from nozero_trainer.runner import run_training
    from nozero_trainer.synthetic import make_data

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nozero-demo-") as tmp:
        data = make_data(Path(tmp) / "data", args.rows, args.dim, config.seed)
        print(f"synthetic data: {args.rows} rows x {args.dim} dims in {data}", file=sys.stderr)
        run_dir = args.out if args.out is not None else Path(tmp) / "run"
        summary = run_training(config, data, run_dir)
        print(format_evaluation(summary.evaluation))
    if args.out is not None:
        print(f"run directory: {args.out} (plot it with: nozero-train plot {args.out})")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")
    return 0


def _configure_postmortem(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, help="a run directory or one bundle in it")


def _postmortem(args: argparse.Namespace) -> int:
    from nozero_trainer.postmortem import diagnose_path

    print(diagnose_path(args.dir), end="")
    return 0


def _configure_plot(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, help="the PNG to write (default: RUN_DIR/run.png)")


def _plot(args: argparse.Namespace) -> int:
    from nozero_trainer.plot import plot_run

    print(f"wrote {plot_run(args.run_dir, args.out)}")
    return 0


def _configure_launch(parser: argparse.ArgumentParser) -> None:
    from nozero_trainer.launch import configure_parser

    configure_parser(parser)


def _launch(args: argparse.Namespace) -> int:
    from nozero_trainer.launch import run_from_args

    return run_from_args(args)


# Every subcommand, in --help order. A new one is one more entry here.
COMMANDS: list[Command] = [
    Command("train", "train on parquet shards (DIR/train, DIR/holdout)", _configure_train, _train),
    Command(
        "make-data", "write synthetic train and holdout shards", _configure_make_data, _make_data
    ),
    Command("demo", "synthetic data, training and evaluation in one go", _configure_demo, _demo),
    Command(
        "postmortem",
        "diagnose a halted run's post-mortem bundle",
        _configure_postmortem,
        _postmortem,
    ),
    Command("plot", "draw a run's metrics into a PNG", _configure_plot, _plot, ("plot",)),
    Command(
        "launch",
        "run N local processes of one multi-process command (e.g. train)",
        _configure_launch,
        _launch,
    ),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nozero-train", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.configure(sub.add_parser(command.name, help=command.help, description=command.help))
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; a flag the subcommand does not know is refused with its own usage."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def missing_extra(command: Command) -> str | None:
    """The one line to print when an extra the command needs is not installed."""
    for extra in command.extras:
        for module in EXTRAS[extra]:
            if importlib.util.find_spec(module) is None:
                return (
                    f"nozero-train {command.name} needs the [{extra}] extra ({module} is "
                    f"not installed): pip install 'nozero[{extra}]'"
                )
    return None


def _report_settings(err: SettingsError) -> None:
    if len(err.problems) == 1:
        print(f"nozero-train: error: {err.problems[0].as_flag()}", file=sys.stderr)
        return
    print(f"nozero-train: error: {len(err.problems)} bad settings:", file=sys.stderr)
    for problem in err.problems:
        print(f"  {problem.as_flag()}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = next(c for c in COMMANDS if c.name == args.command)
    missing = missing_extra(command)
    if missing is not None:
        print(missing, file=sys.stderr)
        return EXIT_USAGE
    # The package's own log lines (rows dropped, heads masked) go to stderr for this call.
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(logging.Formatter("%(message)s"))
    package_log = logging.getLogger("nozero_trainer")
    package_log.addHandler(log_handler)
    package_log.setLevel(logging.INFO)
    try:
        with catch_signals():  # from here on, SIGTERM/SIGINT end the command with one line
            return command.run(args)
    except NonFiniteError as err:
        print(str(err), file=sys.stderr)
        bundle = getattr(err, "postmortem", None)
        if bundle is not None:
            print(f"post-mortem bundle: {bundle}", file=sys.stderr)
            print(f"diagnose it with: nozero-train postmortem {bundle}", file=sys.stderr)
        return EXIT_HALT
    except SettingsError as err:
        _report_settings(err)
        return EXIT_USAGE
    except RunInterrupted as signal:
        # One line, on a line of its own (a progress line may be half written).
        where = getattr(signal, "summary", None)
        text = f"{signal} {where}" if where else str(signal)
        print(f"\nnozero-train: {text}", file=sys.stderr, flush=True)
        return EXIT_SIGNAL_BASE + signal.signum
    except (ValueError, FileNotFoundError) as err:
        print(f"nozero-train: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        package_log.removeHandler(log_handler)


if __name__ == "__main__":
    sys.exit(main())
