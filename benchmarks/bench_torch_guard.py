"""Benchmark nozero.torch's Guard against the usual ways of checking a PyTorch loop.

Not a test. One run measures, side by side, the per-step time of a training step
(forward, backward, AdamW step, zero_grad) on a small MLP, a wide one and a small
transformer language model, for a fused and a foreach AdamW, with these contenders:

- no guard: ``optimizer.step()``, nothing read on the host;
- the guard, ``Guard(optimizer, sync_every=N).step(loss)``, N = 1, 16, 100;
- a per-step ``.item()`` check: the loss and the global grad norm read on the host and
  tested with ``math.isfinite`` before ``optimizer.step()`` (two syncs a step);
- ``clip_grad_norm_(max_norm=1.0, error_if_nonfinite=True)`` before the step (its test of
  the norm reads it on the host; the clipping multiply is part of its cost);
- ``torch.autograd.detect_anomaly()`` around forward and backward;
- torchtitan-style ``torch._assert_async(isfinite(loss) & isfinite(grad_norm))`` before the
  step (on CPU the assert is checked at once; on CUDA it is queued on the stream);
- for a loop that clips anyway: ``clip_grad_norm_(max_norm=1.0)`` alone (no check), and the
  same with the guard at sync_every=16 given the clip's pre-clip norm
  (``guard.step(loss, grad_norm=norm)``): the guard's cost on top of clipping.

Rounds are interleaved, the order rotating each round. A contender's ratio is its time
over no guard's time in the same round: the median and range over the rounds, for the
wall clock and for this process's CPU time (steadier on a shared machine).

Usage: .venv/bin/python benchmarks/bench_torch_guard.py [--rounds N] [--device cpu|cuda]
Prints a markdown table and writes benchmarks/torch_guard_results.json (or the path given
with --out).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from nozero.torch import Guard

HERE = Path(__file__).resolve().parent
BATCH = 64
# The language model: vocabulary, width, layers, heads, sequence length, sequences a step.
LM = {"vocab": 2048, "width": 192, "layers": 3, "heads": 4, "seq": 128, "batch": 4}
# name -> (kind, layer widths or None, optimizer steps per timed block)
MODELS = {
    "small MLP (32 → 128 → 128 → 10, batch 64)": ("mlp", (32, 128, 128, 10), 200),
    "wide MLP (1024 → 2048 → 2048 → 1024, batch 64)": ("mlp", (1024, 2048, 2048, 1024), 8),
    "transformer LM (2.1M parameters, 4 × 128 tokens)": ("lm", None, 4),
}
OPTIMIZERS = ("fused", "foreach")
CONTENDERS = (
    "no guard",
    "guard, sync_every=1",
    "guard, sync_every=16",
    "guard, sync_every=100",
    ".item() per step",
    "clip_grad_norm_(error_if_nonfinite)",
    "detect_anomaly",
    "_assert_async",
    "clip_grad_norm_ only",
    "clip_grad_norm_ + guard, sync_every=16",
)

Step = Callable[[], None]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def mlp(widths: tuple[int, ...]) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for fan_in, fan_out in zip(widths, widths[1:], strict=False):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.GELU()]
    return torch.nn.Sequential(*layers[:-1])


class TinyLM(torch.nn.Module):
    """A decoder-only language model in the shape of GPT-2, small enough for a CPU."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(torch.zeros(seq, width))
        block = torch.nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("causal", torch.nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position
        return self.head(self.blocks(h, mask=self.causal, is_causal=True))


def workload(
    kind: str, widths: tuple[int, ...] | None, device: torch.device
) -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor], Callable[..., torch.Tensor]]:
    """The model, one batch, and the loss of the model on that batch."""
    if kind == "mlp":
        assert widths is not None
        data = (
            torch.randn(BATCH, widths[0], device=device),
            torch.randn(BATCH, widths[-1], device=device),
        )
        return mlp(widths).to(device), data, torch.nn.functional.mse_loss
    lm = TinyLM(LM["vocab"], LM["width"], LM["layers"], LM["heads"], LM["seq"]).to(device)
    tokens = torch.randint(0, LM["vocab"], (LM["batch"], LM["seq"] + 1), device=device)

    def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return lm, (tokens[:, :-1], tokens[:, 1:]), next_token_loss


def grad_norm(model: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])


def contender(
    name: str,
    base: torch.nn.Module,
    kind: str,
    data: tuple[torch.Tensor, torch.Tensor],
    loss_fn: Callable[..., torch.Tensor],
) -> tuple[Step, Callable[[], None]]:
    """One training step for ``name`` on its own copy of ``base``, and its finaliser."""
    model = copy.deepcopy(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **{kind: True})
    x, y = data
    guard = None
    if "guard, sync_every=" in name:
        guard = Guard(optimizer, sync_every=int(name.rsplit("=", 1)[1]))
    clips = name.startswith("clip_grad_norm_ ")

    def loss_of() -> torch.Tensor:
        return loss_fn(model(x), y)

    def step() -> None:
        if name == "detect_anomaly":
            with torch.autograd.detect_anomaly():
                loss = loss_of()
                loss.backward()
        else:
            loss = loss_of()
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) if clips else None
        if guard is not None:
            guard.step(loss, grad_norm=norm)
        else:
            if name == ".item() per step":
                if not (math.isfinite(loss.item()) and math.isfinite(grad_norm(model).item())):
                    raise RuntimeError("non-finite loss or gradient")
            elif name == "clip_grad_norm_(error_if_nonfinite)":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
            elif name == "_assert_async":
                torch._assert_async(torch.isfinite(loss) & torch.isfinite(grad_norm(model)))
            optimizer.step()
        optimizer.zero_grad()

    def finish() -> None:
        if guard is not None:
            guard.close()

    return step, finish


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Step, steps: int, device: torch.device) -> tuple[float, float]:
    """Seconds per step, wall clock and this process's CPU time."""
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(
    model: tuple[str, tuple[int, ...] | None],
    steps: int,
    kind: str,
    rounds: int,
    device: torch.device,
) -> dict[str, dict]:
    torch.manual_seed(0)
    base, data, loss_fn = workload(*model, device)
    runs = {name: contender(name, base, kind, data, loss_fn) for name in CONTENDERS}
    for step, _ in runs.values():  # warm-up: allocations, first-call costs
        timed(step, 2, device)
    wall: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    cpu: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for r in range(rounds):
        order = CONTENDERS[r % len(CONTENDERS) :] + CONTENDERS[: r % len(CONTENDERS)]
        for name in order:
            w, c = timed(runs[name][0], steps, device)
            wall[name].append(w)
            cpu[name].append(c)
    for _, finish in runs.values():
        finish()
    out = {}
    for name in CONTENDERS:
        ratios = [w / b for w, b in zip(wall[name], wall["no guard"], strict=True)]
        cpu_ratios = [c / b for c, b in zip(cpu[name], cpu["no guard"], strict=True)]
        out[name] = {
            "ms_per_step": summary([1000 * w for w in wall[name]]),
            "ratio": summary(ratios),
            "cpu_ratio": summary(cpu_ratios),
        }
    return out


def machine(device: torch.device) -> dict[str, object]:
    cpu_model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, object] = {
        "cpu": cpu_model,
        "cores_visible": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def table(results: list[dict]) -> str:
    lines = []
    for block in results:
        lines.append(f"\n### {block['model']}, AdamW {block['optimizer']}\n")
        lines.append(
            "| contender | ms/step (median) | × no guard, wall (range) | × no guard, CPU |"
        )
        lines.append("| --- | ---: | ---: | ---: |")
        for name, row in block["contenders"].items():
            ms, ratio, cpu = row["ms_per_step"], row["ratio"], row["cpu_ratio"]
            lines.append(
                f"| {name} | {ms['median']:.3f} | {ratio['median']:.3f} "
                f"({ratio['min']:.3f}–{ratio['max']:.3f}) | {cpu['median']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    # One thread by default: on a shared machine, torch's intra-op threads spin against
    # other processes and make a tiny step take tens of milliseconds.
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's)")
    parser.add_argument("--out", type=Path, default=HERE / "torch_guard_results.json")
    parser.add_argument(
        "--steps-scale", type=int, default=1, help="multiply each model's steps per block"
    )
    parser.add_argument("--model", default="", help="only the models whose name contains this text")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    results = []
    for model_name, (model_kind, widths, base_steps) in MODELS.items():
        if args.model not in model_name:
            continue
        steps = base_steps * args.steps_scale
        for kind in OPTIMIZERS:
            say(f"{model_name}, AdamW {kind}: {args.rounds} rounds of {steps} steps each")
            results.append(
                {
                    "model": model_name,
                    "optimizer": kind,
                    "steps_per_block": steps,
                    "rounds": args.rounds,
                    "contenders": measure((model_kind, widths), steps, kind, args.rounds, device),
                }
            )
    report = {"machine": machine(device), "results": results}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["machine"], indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
