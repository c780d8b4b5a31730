"""A short device check of nozero.torch's Guard on a CUDA GPU. Not a test.

1. No host sync between sync points: the guard's steps run under
   ``torch.cuda.set_sync_debug_mode("error")`` (any synchronising call raises), and only
   the step that is a sync point runs with the mode off.
2. Exact step on the device: a NaN at step 5 with ``sync_every=16`` halts at step 5, and
   the parameters and optimizer state after the halt equal those after step 4, for fused
   and foreach AdamW (the fused kernel's ``found_inf`` path is what runs on CUDA).
3. The CPU benchmark's table on CUDA (benchmarks/bench_torch_guard.py, --device cuda).

Usage: python benchmarks/gpu_check_torch.py [--out DIR] [--rounds N]
Writes DIR/gpu_check_torch.json and DIR/torch_guard_results_cuda.json; exits non-zero
if check 1 or 2 fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from nozero.torch import Guard, GuardHalt

HERE = Path(__file__).resolve().parent
SYNC_EVERY = 16
BAD = 5


def _setup(kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8)
    ).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, **{kind: True})


def _step(model: torch.nn.Module, guard: Guard, poison: bool) -> None:
    x = torch.randn(32, 64, device="cuda")
    if poison:
        x[0, 0] = float("nan")
    loss = torch.nn.functional.mse_loss(model(x), torch.zeros(32, 8, device="cuda"))
    loss.backward()
    guard.step(loss)
    guard.optimizer.zero_grad()


def no_sync_between_syncs(kind: str) -> dict[str, object]:
    model, optimizer = _setup(kind)
    guard = Guard(optimizer, sync_every=SYNC_EVERY)
    _step(model, guard, poison=False)  # first-step allocations (optimizer state) outside
    torch.cuda.synchronize()
    errors = []
    for step in range(1, 3 * SYNC_EVERY):
        due = (step + 1) % SYNC_EVERY == 0
        torch.cuda.set_sync_debug_mode(0 if due else "error")
        try:
            _step(model, guard, poison=False)
        except RuntimeError as err:  # a synchronising call under "error"
            errors.append(f"step {step}: {err}")
        finally:
            torch.cuda.set_sync_debug_mode(0)
    guard.close()
    return {"optimizer": kind, "ok": not errors, "errors": errors[:5]}


def exact_step(kind: str) -> dict[str, object]:
    model, optimizer = _setup(kind)
    guard = Guard(optimizer, sync_every=SYNC_EVERY)
    snapshot = None
    try:
        for step in range(2 * SYNC_EVERY):
            if step == BAD:
                snapshot = (
                    [p.detach().clone() for p in model.parameters()],
                    {k: {n: t.clone() for n, t in v.items()} for k, v in optimizer.state.items()},
                )
            _step(model, guard, poison=step == BAD)
        guard.close()
        return {"optimizer": kind, "ok": False, "error": "no halt"}
    except GuardHalt as halt:
        params, state = snapshot
        same_params = all(
            torch.equal(p, q) for p, q in zip(model.parameters(), params, strict=True)
        )
        same_state = all(
            torch.equal(optimizer.state[k][n], t) for k, v in state.items() for n, t in v.items()
        )
        ok = halt.step == BAD and same_params and same_state
        return {
            "optimizer": kind,
            "ok": ok,
            "step": halt.step,
            "message": str(halt),
            "params_equal_last_good": same_params,
            "state_equal_last_good": same_state,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    checks = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "no_sync_between_syncs": [no_sync_between_syncs(k) for k in ("fused", "foreach")],
        "exact_step": [exact_step(k) for k in ("fused", "foreach")],
    }
    (args.out / "gpu_check_torch.json").write_text(json.dumps(checks, indent=2) + "\n")
    print(json.dumps(checks, indent=2))
    sys.path.insert(0, str(HERE))
    import bench_torch_guard

    bench_torch_guard.main(
        [
            "--device=cuda",
            "--threads=0",
            f"--rounds={args.rounds}",
            "--steps-scale=10",
            f"--out={args.out / 'torch_guard_results_cuda.json'}",
        ]
    )
    passed = all(
        c["ok"] for group in ("no_sync_between_syncs", "exact_step") for c in checks[group]
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
