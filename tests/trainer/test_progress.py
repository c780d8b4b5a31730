"""The progress line's steps/s: a recent rate that two syncs arriving together cannot spike."""

from __future__ import annotations

import io
import re

from nozero_trainer import progress


def test_two_syncs_read_moments_apart_do_not_show_a_burst(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 2.001])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress, "compile_seconds", lambda: 0.0)
    out = io.StringIO()
    bar = progress.Progress(total=300, start=0, stream=out)
    for step in (100, 200, 300):
        bar.update(step, loss=0.5, grad_norm=0.1, lr=1e-3)
    rates = [float(r) for r in re.findall(r"([\d.]+) steps/s", out.getvalue())]
    assert rates[:2] == [100.0, 100.0]
    # The last sync reached the host 1 ms after the one before it: over the window the
    # rate is still ~150 steps/s, where the last interval alone would say 100,000.
    assert 140 < rates[2] < 160, rates


def test_compile_time_is_left_out_of_the_rate(monkeypatch):
    clock = iter([0.0, 3.0])
    compiled = iter([0.0, 2.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress, "compile_seconds", lambda: next(compiled))
    out = io.StringIO()
    progress.Progress(total=100, start=0, stream=out).update(100, 0.5, 0.1, 1e-3)
    assert "compiled in 2.0 s" in out.getvalue()
    assert re.search(r" 100\.0 steps/s", out.getvalue()), out.getvalue()
