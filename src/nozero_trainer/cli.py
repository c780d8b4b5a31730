"""``nozero-train``: train, make synthetic data, run the demo, diagnose or plot a run.

Exit status: 0 success, 2 usage error or bad settings/data/checkpoint, 3 non-finite halt.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from nozero import NonFiniteError
from nozero_trainer.config import TrainConfig

EXIT_USAGE = 2
EXIT_HALT = 3

# The demo trains a smaller model than the shipped defaults so it finishes in about a
# minute on two CPU cores; everything else is the real pipeline.
DEMO = {"rows": 60000, "dim": 512, "steps": 2000, "hidden_dims": (512, 256),
        "batch_size": 256, "warmup_steps": 100}


def _hidden_dims(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("", "none", "linear"):
        return ()
    try:
        dims = tuple(int(part) for part in text.split(","))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected widths like 512,256, got {text!r}") from err
    return dims


def _add_train_settings(parser: argparse.ArgumentParser, **overrides) -> None:
    d = dataclasses.replace(TrainConfig(), **overrides)
    add = parser.add_argument
    add("--steps", type=int, default=d.steps)
    add("--batch-size", type=int, default=d.batch_size)
    add("--peak-lr", type=float, default=d.peak_lr)
    add("--warmup-steps", type=int, default=d.warmup_steps)
    add("--end-lr-ratio", type=float, default=d.end_lr_ratio)
    add("--focal-gamma", type=float, default=d.focal_gamma)
    add("--focal-alpha", type=float, default=d.focal_alpha, help="unset = no alpha weighting")
    add("--label-smoothing", type=float, default=d.label_smoothing)
    add("--reverse-ce-weight", type=float, default=d.reverse_ce_weight)
    add("--hidden-dims", type=_hidden_dims, default=d.hidden_dims,
        help="comma-separated widths, e.g. 512,256; 'none' for a linear head")
    add("--eval-every", type=int, default=d.eval_every)
    add("--seed", type=int, default=d.seed)
    add("--sync-every", type=int, default=d.sync_every,
        help="steps between host checks of the guard (the halt step is exact regardless)")
    add("--chunk-steps", type=int, default=d.chunk_steps, help="steps per device dispatch")
    add("--clip-norm", type=float, default=d.clip_norm)
    add("--weight-decay", type=float, default=d.weight_decay)
    add("--no-class-weighting", dest="class_weighting", action="store_false")
    add("--mask-zero-positive-heads", action="store_true",
        help="train without heads that have no positives instead of refusing")


def _config(args: argparse.Namespace) -> TrainConfig:
    names = {f.name for f in dataclasses.fields(TrainConfig)} - {"heads"}
    return TrainConfig(**{name: getattr(args, name) for name in names})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nozero-train", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train on parquet shards (DIR/train, DIR/holdout)")
    train.add_argument("--data", type=Path, required=True)
    train.add_argument("--out", type=Path, required=True)
    _add_train_settings(train)
    train.add_argument("--resume", action="store_true",
                       help="continue from the run directory's latest checkpoint")
    train.add_argument("--holdout-scores-out", type=Path, metavar="FILE",
                       help="write every holdout row's per-head scores to this parquet file")
    train.add_argument("--on-nonfinite", choices=("halt", "restart"), default="halt",
                       help="restart: from the last good checkpoint with half the learning rate")
    train.add_argument("--max-restarts", type=int, default=3)
    make = sub.add_parser("make-data", help="write synthetic train and holdout shards")
    make.add_argument("out", type=Path)
    make.add_argument("--rows", type=int, required=True)
    make.add_argument("--dim", type=int, required=True)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--shards", type=int, default=4)
    demo = sub.add_parser("demo", help="synthetic data, training and evaluation in one go")
    demo.add_argument("--rows", type=int, default=DEMO["rows"])
    demo.add_argument("--dim", type=int, default=DEMO["dim"])
    _add_train_settings(demo, **{k: v for k, v in DEMO.items() if k not in ("rows", "dim")})
    demo.add_argument("--out", type=Path,
                      help="keep the run directory here (default: a temporary one, removed)")
    postmortem = sub.add_parser("postmortem", help="diagnose a halted run's post-mortem bundle")
    postmortem.add_argument("dir", type=Path, help="a run directory or one bundle in it")
    plot = sub.add_parser("plot", help="draw a run's metrics into a PNG")
    plot.add_argument("run_dir", type=Path)
    plot.add_argument("--out", type=Path, help="default: RUN_DIR/run.png")
    return parser


def _train(args: argparse.Namespace) -> int:
    from nozero_trainer.runner import RunOptions, format_evaluation, run_training

    options = RunOptions(resume=args.resume, holdout_scores_out=args.holdout_scores_out,
                         on_nonfinite=args.on_nonfinite, max_restarts=args.max_restarts)
    summary = run_training(_config(args), args.data, args.out, options=options)
    print(format_evaluation(summary.evaluation))
    if summary.holdout_scores is not None:
        print(f"holdout scores: {summary.holdout_scores}")
    print(f"run directory: {summary.out_dir}")
    print(f"finished at step {summary.state.step} after {summary.restarts} restart(s)")
    return 0


def _postmortem(args: argparse.Namespace) -> int:
    from nozero_trainer.postmortem import diagnose_path

    print(diagnose_path(args.dir), end="")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from nozero_trainer.plot import PlotUnavailable, plot_run

    try:
        print(f"wrote {plot_run(args.run_dir, args.out)}")
    except PlotUnavailable as err:
        print(f"nozero-train: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _make_data(args: argparse.Namespace) -> int:
    from nozero_trainer.synthetic import make_data

    out = make_data(args.out, args.rows, args.dim, args.seed, shards=args.shards)
    print(f"wrote {out}/train and {out}/holdout")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from nozero_trainer.runner import format_evaluation, run_training
    from nozero_trainer.synthetic import make_data

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nozero-demo-") as tmp:
        data = make_data(Path(tmp) / "data", args.rows, args.dim, args.seed)
        print(f"synthetic data: {args.rows} rows x {args.dim} dims in {data}", file=sys.stderr)
        run_dir = args.out if args.out is not None else Path(tmp) / "run"
        summary = run_training(_config(args), data, run_dir)
        print(format_evaluation(summary.evaluation))
    if args.out is not None:
        print(f"run directory: {args.out} (plot it with: nozero-train plot {args.out})")
    print(f"demo finished in {time.perf_counter() - started:.0f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The package's own log lines (rows dropped, heads masked) go to stderr for this call.
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(logging.Formatter("%(message)s"))
    package_log = logging.getLogger("nozero_trainer")
    package_log.addHandler(log_handler)
    package_log.setLevel(logging.INFO)
    handlers = {"train": _train, "make-data": _make_data, "demo": _demo,
                "postmortem": _postmortem, "plot": _plot}
    try:
        return handlers[args.command](args)
    except NonFiniteError as err:
        print(str(err), file=sys.stderr)
        bundle = getattr(err, "postmortem", None)
        if bundle is not None:
            print(f"post-mortem bundle: {bundle}", file=sys.stderr)
            print(f"diagnose it with: nozero-train postmortem {bundle}", file=sys.stderr)
        return EXIT_HALT
    except (ValueError, FileNotFoundError) as err:
        print(f"nozero-train: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        package_log.removeHandler(log_handler)


if __name__ == "__main__":
    sys.exit(main())
