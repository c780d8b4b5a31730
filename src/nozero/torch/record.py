"""The device-side record: one row per optimizer step, read by the host at sync points.

Each step writes a row ``[code, loss, n_1, ..., n_k]`` into a window of ``sync_every``
rows on the device, with no host read. On the fast path (no loss scaler, no ranks to
agree with) the ``n_i`` are the per-tensor gradient norms and the row costs two kernels:
one ``stack`` into the window and one ``_amp_foreach_non_finite_check_and_unscale_``,
the check ``GradScaler`` uses, which sets ``found_inf`` to exactly ``1.0`` when the row
holds a NaN or an infinity and never clears it. That sticky flag is what the fused
optimizers skip an update on. With a loss scaler or ranks, the guard decides the step's
verdict itself and writes ``[code, loss, global norm]``, where a code above 0 names
why the step is bad.

The host copies the window at a sync point (non-blocking, then an event on CUDA) and
finds the first bad row: that is the exact step, and the row holds its loss and norm.
The global norm is the root of the summed squares of the row's norms, in float64.
"""

from __future__ import annotations

import dataclasses
import math

import torch

# Why a step halted, by the code a row stores (0: a good step).
NON_FINITE, TOO_MANY_SKIPS, SCALE_FLOOR = 1, 2, 3
REASONS = {
    NON_FINITE: "non-finite loss or gradient",
    TOO_MANY_SKIPS: "too many consecutive loss-scaler skips",
    SCALE_FLOOR: "loss scale below its floor",
}


@dataclasses.dataclass(frozen=True)
class HostRecord:
    """The first bad step of a window as the host read it (``first_bad`` ``None``: none)."""

    first_bad: int | None
    loss: float = math.nan
    grad_norm: float = math.nan
    reason: str | None = None
    # ``(step, loss, grad_norm)`` of each step read, up to the first bad one, when asked.
    checked: tuple[tuple[int, float, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class _Layout:
    """What the host must know to read one row: its width, and whether a loss was seen."""

    width: int
    has_loss: bool
    coded: bool


def _is_bad(row: list[float], layout: _Layout) -> bool:
    """A row's verdict: its code, or (on the fast path) any of its values not finite."""
    if layout.coded:
        return row[0] > 0
    values = row[1 : layout.width] if layout.has_loss else row[2 : layout.width]
    return not all(map(math.isfinite, values))


def _global_norm(norms: list[float]) -> float:
    return math.sqrt(math.fsum(n * n for n in norms)) if norms else 0.0


class StepRecord:
    """The rows of one guard's current window, on ``device``."""

    def __init__(self, device: torch.device, window: int, width: int) -> None:
        self.device = device
        self.window = int(window)
        # Exactly 1.0 from the first bad step on: the fused kernels' ``found_inf``.
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        self._rows = torch.zeros(
            (self.window, max(int(width), 3)), dtype=torch.float32, device=device
        )
        self._one = torch.ones((), dtype=torch.float32, device=device)
        self._zero = torch.zeros((), dtype=torch.float32, device=device)
        self._layouts: list[_Layout] = []
        self._views: dict[tuple[int, int], torch.Tensor] = {}  # (row, width) -> view, made once
        self._host: torch.Tensor | None = None
        self._host_flag: torch.Tensor | None = None
        self._event: torch.cuda.Event | None = None
        self._skips = torch.zeros((), dtype=torch.float32, device=device)

    def _next_row(self, width: int, has_loss: bool, coded: bool) -> torch.Tensor:
        if len(self._layouts) >= self.window:
            raise RuntimeError("the guard's record is full: sync before the next step")
        if width > self._rows.shape[1]:  # a parameter group was added: widen the window
            wider = torch.zeros((self.window, width), dtype=torch.float32, device=self.device)
            wider[:, : self._rows.shape[1]] = self._rows
            self._rows = wider
            self._views = {}
        key = (len(self._layouts), width)
        row = self._views.get(key)
        if row is None:
            row = self._views[key] = self._rows[key[0], :width]
        self._layouts.append(_Layout(width, has_loss, coded))
        return row

    def write_checked(self, loss: torch.Tensor | None, norms: list[torch.Tensor]) -> None:
        """The fast path: record ``loss`` and the gradient ``norms``; flag any non-finite."""
        row = self._next_row(2 + len(norms), loss is not None, coded=False)
        head = self._zero if loss is None else loss
        torch.stack([self._zero, head, *norms], out=row)
        torch._amp_foreach_non_finite_check_and_unscale_([row], self.found_inf, self._one)

    def write_coded(
        self, code: torch.Tensor, bad: torch.Tensor, loss: torch.Tensor | None, norm: torch.Tensor
    ) -> None:
        """A verdict the guard made: ``code`` (0 or a :data:`REASONS` key), ``bad`` (bool)."""
        row = self._next_row(3, loss is not None, coded=True)
        head = self._zero if loss is None else loss
        torch.stack([code.float(), head, norm], out=row)
        torch.maximum(self.found_inf, bad.float(), out=self.found_inf)

    def skips(self) -> torch.Tensor:
        """The consecutive loss-scaler skips so far (0-dim device tensor), updated in place."""
        return self._skips

    def start_read(self) -> None:
        """Start copying the window to the host without waiting for the device."""
        used = len(self._layouts)
        cuda = self.device.type == "cuda"
        if self._host is None or self._host.shape != self._rows.shape:
            self._host = torch.empty(self._rows.shape, dtype=torch.float32, pin_memory=cuda)
            self._host_flag = torch.empty((), dtype=torch.float32, pin_memory=cuda)
        assert self._host_flag is not None
        self._host_flag.copy_(self.found_inf, non_blocking=True)
        if used:
            self._host[:used].copy_(self._rows[:used], non_blocking=True)
        if cuda:
            self._event = torch.cuda.Event()
            self._event.record()

    def finish_read(self, first_step: int, every_row: bool = False) -> HostRecord:
        """Wait for :meth:`start_read`'s copy; ``first_step``: the window's first step.

        ``every_row``: also hand back each step's values (read only when asked). The
        window is then empty again.
        """
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        layouts, self._layouts = self._layouts, []
        assert self._host is not None and self._host_flag is not None
        flagged = float(self._host_flag) > 0
        if not (flagged or every_row):
            return HostRecord(first_bad=None)
        rows = [self._host[i, : layout.width].tolist() for i, layout in enumerate(layouts)]
        index = None
        if flagged:
            index = next((i for i, row in enumerate(rows) if _is_bad(row, layouts[i])), None)
        values = [
            (first_step + i, row[1] if layout.has_loss else math.nan, _global_norm(row[2:]))
            for i, (row, layout) in enumerate(zip(rows, layouts, strict=True))
        ]
        checked = tuple(values[: len(values) if index is None else index + 1]) if every_row else ()
        if index is None:
            # Clean, or the flag was set in an earlier window whose halt was raised already.
            return HostRecord(first_bad=None, checked=checked)
        step, loss, grad_norm = values[index]
        return HostRecord(
            first_bad=step,
            loss=loss,
            grad_norm=grad_norm,
            reason=REASONS[int(rows[index][0]) or NON_FINITE],
            checked=checked,
        )
