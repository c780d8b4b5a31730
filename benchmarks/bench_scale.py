"""Benchmark data-parallel training of the shipped config: 1 device, 2 devices, 2 processes.

Not a test. One run measures, side by side at one global batch (256) on in-memory
synthetic rows (1024 dims), in three setups each started fresh (the device count is fixed
when JAX starts): 1 device; 2 forced host devices in one process; 2 processes x 1 device
(``nozero-train launch``'s machinery, gloo collectives). In each setup:

- steps/s with the guard on and off (the guard's overhead under sharding), and with a
  host read of the step's record after every step (``sync_every=1``: what a per-step
  all-reduce plus host read costs, as Megatron-style loops pay it);
- one all-reduce of a gradient-sized tree (the shipped model's parameters) over ``data``;
- one sync's read: fetching 100 steps' records and the finiteness flag to the host.

Usage: .venv/bin/python benchmarks/bench_scale.py [--repeats N] [--steps N]
Prints a markdown table and writes benchmarks/scale_results.json.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIM = 1024
ROWS = 16_384
SYNC_EVERY = 100
SETUPS = {
    "1 device": (1, 1),
    "2 forced devices": (1, 2),
    "2 processes x 1 device": (2, 1),
}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def worker(repeats: int, steps: int, out: Path) -> None:
    """One process of one setup: measure and (process 0) write the figures to ``out``."""
    from nozero_trainer import distributed

    distributed.initialize(distributed.settings_from())
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec

    from nozero_trainer import loop
    from nozero_trainer.config import TrainConfig
    from nozero_trainer.model import init_params
    from nozero_trainer.sharding import DATA, data_placement, replicate

    placement = data_placement()
    me, count = jax.process_index(), jax.process_count()
    config = TrainConfig(steps=steps, sync_every=SYNC_EVERY, chunk_steps=50, eval_every=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, DIM), dtype=np.float32)
    y = (rng.random((ROWS, len(config.heads))) < 0.1).astype(np.float32)
    bounds = np.linspace(0, ROWS, count + 1).astype(int)
    x, y = x[bounds[me] : bounds[me + 1]], y[bounds[me] : bounds[me + 1]]
    counts = distributed.exchange("rows", len(x))

    def train(guard: bool = True, sync_every: int = SYNC_EVERY) -> None:
        run_config = dataclasses.replace(
            config, sync_every=sync_every, chunk_steps=min(config.chunk_steps, sync_every)
        )
        loop.train_arrays(run_config, x, y, placement=placement, row_counts=counts, guard=guard)

    contenders = {
        "guard on": lambda: train(True),
        "guard off": lambda: train(False),
        "read every step": lambda: train(True, sync_every=1),
    }
    for run in contenders.values():  # compile outside the timings
        run()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(repeats):  # rotate the order each round: the machine is shared
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            started, started_cpu = time.perf_counter(), time.process_time()
            contenders[name]()
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)

    def overheads(seconds: dict[str, list[float]]) -> list[float]:
        pairs = zip(seconds["guard on"], seconds["guard off"], strict=True)
        return [on / off - 1 for on, off in pairs]

    # One all-reduce of a gradient-sized tree: each device holds its own copy, summed.
    params = init_params(jax.random.PRNGKey(0), DIM, config.hidden_dims, len(config.heads))

    def copies(leaf: np.ndarray) -> jax.Array:
        stacked = np.broadcast_to(leaf, (placement.devices, *leaf.shape))
        return jax.make_array_from_callback(stacked.shape, placement.batch, stacked.__getitem__)

    per_device = jax.tree.map(lambda a: copies(np.asarray(a)), params)
    reduce = jax.jit(
        jax.shard_map(
            lambda tree: jax.tree.map(lambda a: jax.lax.psum(a, DATA), tree),
            mesh=placement.mesh,
            in_specs=PartitionSpec(DATA),
            out_specs=PartitionSpec(),
        )
    )
    jax.block_until_ready(reduce(per_device))
    all_reduce_s = _median_time(lambda: jax.block_until_ready(reduce(per_device)), 50)
    grad_bytes = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(params))

    # One sync's read: fresh records (a fetched array caches its host copy) each time.
    make_records = jax.jit(
        lambda i: (jnp.full((SYNC_EVERY, len(loop.STEP_FIELDS)), i, jnp.float32), i > -1),
        out_shardings=placement.replicated,
    )
    reads = []
    for i in range(200):
        records = jax.block_until_ready(make_records(replicate(np.float32(i), placement)))
        started = time.perf_counter()
        jax.device_get(records)
        reads.append(time.perf_counter() - started)

    if me == 0:
        best = {name: steps / min(t) for name, t in times.items()}
        out.write_text(
            json.dumps(
                {
                    "devices": placement.devices,
                    "processes": count,
                    "steps": steps,
                    "steps_per_s": best,
                    "steps_per_s_median": {
                        n: steps / statistics.median(t) for n, t in times.items()
                    },
                    "guard_overhead_median": statistics.median(overheads(times)),
                    "guard_overhead_range": [min(overheads(times)), max(overheads(times))],
                    # CPU time of process 0 (all its threads): what the guard costs in
                    # work, much less disturbed by other load on a shared machine.
                    "guard_overhead_cpu_median": statistics.median(overheads(cpu)),
                    "guard_overhead_cpu_range": [min(overheads(cpu)), max(overheads(cpu))],
                    "all_reduce_s": all_reduce_s,
                    "all_reduce_bytes": grad_bytes,
                    "sync_read_s": statistics.median(reads),
                    "per_step_read_cost_s": statistics.median(times["read every step"]) / steps
                    - statistics.median(times["guard on"]) / steps,
                }
            )
        )


def run_setup(name: str, processes: int, devices: int, repeats: int, steps: int) -> dict:
    from nozero_trainer.launch import run_processes

    out = HERE / f".scale-{processes}x{devices}.json"
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--repeats",
        str(repeats),
        "--steps",
        str(steps),
        "--out",
        str(out),
    ]
    say(f"{name}: {processes} process(es) x {devices} device(s)")
    status = run_processes(command, processes, devices)
    if status != 0:
        raise SystemExit(f"{name}: the benchmark processes ended with status {status}")
    result = json.loads(out.read_text())
    out.unlink()
    return result


def render(results: dict[str, dict]) -> str:
    lines = [
        "| setup | steps/s guard on | guard off | guard overhead, wall (median, range) "
        "| guard overhead, CPU time | read every step | one all-reduce | one sync's read |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def share(r: dict, key: str) -> str:
        low, high = r[key + "_range"]
        return f"{100 * r[key + '_median']:+.1f}% ({100 * low:+.1f}% .. {100 * high:+.1f}%)"

    for name, r in results.items():
        lines.append(
            f"| {name} | {r['steps_per_s']['guard on']:.0f} | {r['steps_per_s']['guard off']:.0f} "
            f"| {share(r, 'guard_overhead')} | {share(r, 'guard_overhead_cpu')} "
            f"| {r['steps_per_s']['read every step']:.0f} "
            f"| {1e3 * r['all_reduce_s']:.3f} ms ({r['all_reduce_bytes'] / 2**20:.2f} MiB) "
            f"| {1e6 * r['sync_read_s']:.0f} µs |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.repeats, args.steps, args.out)
        return 0
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    results = {
        name: run_setup(name, processes, devices, args.repeats, args.steps)
        for name, (processes, devices) in SETUPS.items()
    }
    table = render(results)
    print(table)
    (HERE / "scale_results.json").write_text(
        json.dumps(
            {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)", **results},
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
