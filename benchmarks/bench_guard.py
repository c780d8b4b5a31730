"""Benchmark nozero.jax's guard against the usual ways of guarding a JAX training loop.

Not a test. One run measures, side by side, on the reference trainer's shipped config
(1024 → 512 → 256 → 8, batch 256) and its linear config (1024 → 8, batch 32) -- its
model, loss and optimizer, data on the device, batches gathered from row indices:

- no guard: a ``lax.scan`` of 50 steps per dispatch, nothing read before the end;
- the same, reading the steps' metrics every 100 steps (what any sync point costs);
- the guard: ``nozero.jax.Guard`` over the same scan, synced every 100 steps;
- a per-step ``float(loss)`` check (the common way): one jitted step per dispatch, its
  loss and gradient norm read on the host after every step;
- checkify with NaN checks over the same scan, its error thrown after each dispatch;
- ``optax.apply_if_finite`` around the optimizer over the same scan (its cost only: it
  skips non-finite updates, the opposite of the guard's rule).

Rounds are interleaved, the order rotating each round; a contender's ratio is its time
over no guard's time in the same round, the median (and range) over the rounds, for the
wall clock and for this process's CPU time.

Usage: .venv/bin/python benchmarks/bench_guard.py [--rounds N]
Prints a markdown table and writes benchmarks/guard_results.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import optax
from jax.experimental import checkify

from nozero import check_finite
from nozero.jax import Guard, scan_steps
from nozero_trainer import loop
from nozero_trainer.config import TrainConfig
from nozero_trainer.optim import make_optimizer

HERE = Path(__file__).resolve().parent
ROWS, DIM, HEADS = 20_000, 1024, 8
CHUNK, SYNC = 50, 100
CONFIGS = {
    "shipped (1024 → 512 → 256 → 8, batch 256)": (TrainConfig(), 100),
    "linear (1024 → 8, batch 32)": (TrainConfig(hidden_dims=(), batch_size=32), 2000),
}
CONTENDERS = (
    "no guard",
    "no guard, metrics read every 100 steps",
    "guard",
    "float(loss) per step",
    "checkify NaN checks",
    "optax.apply_if_finite",
)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def contenders(config: TrainConfig, steps: int, data: tuple) -> dict[str, Callable[[], None]]:
    """One closure per contender, each training ``steps`` steps from the same state."""
    n_rows = len(data[0])
    rows = [loop.batch_rows(config, s, n_rows) for s in range(steps)]
    chunks = [np.stack(rows[i : i + CHUNK]) for i in range(0, steps, CHUNK)]
    state = loop.init_state(config, DIM, HEADS)
    carry = loop.place_state(state)
    step, rows_step = loop.step_functions(config)
    plain_scan = jax.jit(scan_steps(rows_step))
    guard = Guard(rows_step, multi_step=scan_steps(rows_step), check=lambda c: c.params)
    single = jax.jit(rows_step)
    checked = jax.jit(checkify.checkify(scan_steps(rows_step), errors=checkify.nan_checks))
    skipping = optax.apply_if_finite(  # noqa: NZ401 the peer priced here, never trained with
        make_optimizer(config), max_consecutive_errors=10
    )
    skip_scan = jax.jit(scan_steps(loop.step_functions(config, skipping)[1]))
    skip_carry = loop.place_state(dataclasses.replace(state, opt_state=skipping.init(state.params)))

    def no_guard() -> None:
        c = carry
        for chunk in chunks:
            c, _ = plain_scan(c, chunk, *data)
        jax.block_until_ready(c)

    def read_at_syncs() -> None:
        # What any check at sync points pays: the host reads the steps' metrics.
        c, metrics = carry, []
        for i, chunk in enumerate(chunks, start=1):
            c, m = plain_scan(c, chunk, *data)
            metrics.append(m)
            if i * CHUNK % SYNC == 0 or i == len(chunks):
                jax.device_get(metrics)
                metrics = []
        jax.block_until_ready(c)

    def guarded() -> None:
        jax.block_until_ready(guard.run(carry, chunks, operands=data, sync_every=SYNC).state)

    def float_per_step() -> None:
        c = carry
        for s, r in enumerate(rows):
            c, metrics = single(c, r, *data)
            check_finite(s, metrics["loss"], metrics["grad_norm"])  # float() of both
        jax.block_until_ready(c)

    def with_checkify() -> None:
        c = carry
        for chunk in chunks:
            err, (c, _) = checked(c, chunk, *data)
            err.throw()
        jax.block_until_ready(c)

    def apply_if_finite() -> None:
        c = skip_carry
        for chunk in chunks:
            c, _ = skip_scan(c, chunk, *data)
        jax.block_until_ready(c)

    return dict(
        zip(
            CONTENDERS,
            (no_guard, read_at_syncs, guarded, float_per_step, with_checkify, apply_if_finite),
            strict=True,
        )
    )


def rounds_of(measures: dict[str, Callable[[], None]], rounds: int) -> list[dict[str, tuple]]:
    """Per round, each measure's (wall, process CPU) seconds; the order rotates each round.

    CPU time counts only this process's threads, so other users of a shared machine
    disturb it less than the wall clock (XLA's worker threads are counted too).
    """
    names, out = list(measures), []
    for round_ in range(rounds):
        times = {}
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            measures[name]()
            times[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        out.append(times)
    return out


def summarise(rounds: list[dict[str, tuple]], steps: int) -> dict[str, dict[str, float]]:
    """Best steps/s, and the median and range over rounds of time / no guard's time."""
    out = {}
    for name in rounds[0]:
        wall = [r[name][0] / r["no guard"][0] for r in rounds]
        cpu = [r[name][1] / r["no guard"][1] for r in rounds]
        out[name] = {
            "steps_per_s": steps / min(r[name][0] for r in rounds),
            "ratio": statistics.median(wall),
            "ratio_min": min(wall),
            "ratio_max": max(wall),
            "cpu_ratio": statistics.median(cpu),
            "cpu_min": min(cpu),
            "cpu_max": max(cpu),
        }
    return out


def render(results: list[dict], rounds: int) -> str:
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, JAX {jax.__version__} on "
        f"{jax.default_backend()}; {rounds} interleaved rounds.",
        "",
        "| config | contender | steps/s (best) | wall time vs no guard | range "
        "| CPU time vs no guard | range |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        for name, s in r["contenders"].items():
            lines.append(
                f"| {r['config']} | {name} | {s['steps_per_s']:.1f} | {s['ratio']:.3f}x | "
                f"{s['ratio_min']:.2f}–{s['ratio_max']:.2f} | {s['cpu_ratio']:.3f}x | "
                f"{s['cpu_min']:.2f}–{s['cpu_max']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    cls = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    labels = (rng.random((ROWS, HEADS)) < 0.2).astype(np.float32)
    weights, mask = np.ones(HEADS, np.float32), np.ones(HEADS, np.float32)
    data = loop.place_data((cls, labels, weights, mask))
    results = []
    for name, (config, steps) in CONFIGS.items():
        config = dataclasses.replace(config, steps=steps, warmup_steps=10)
        measures = contenders(config, steps, data)
        say(f"{name}: compiling")
        rounds_of(measures, 1)
        say(f"{name}: {args.rounds} interleaved rounds of {steps} steps")
        results.append(
            {
                "config": name,
                "steps": steps,
                "contenders": summarise(rounds_of(measures, args.rounds), steps),
            }
        )
        say(json.dumps(results[-1]))
    (HERE / "guard_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(render(results, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
