"""``nozero-train launch``: N local processes of one multi-process run, on one machine.

Each process gets ``NOZERO_COORDINATOR`` (a free local port), ``NOZERO_NUM_PROCESSES`` and
``NOZERO_PROCESS_ID``, and with ``--devices-per-process K`` that many forced host devices.
Their output lines are prefixed ``[pI]``. The exit status is the worst of theirs (a
signal ``S`` counts as ``128 + S``, as a shell reports it).

When a process dies, JAX's runtime aborts the others (``SIGABRT`` and a C++ stack trace)
once its heartbeat times out. Launch keeps that noise out of the output and says instead,
in one line per process, which process died first and how.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from nozero_trainer import distributed

# The first line of the runtime's report that a peer is gone; everything it prints from
# there on (log lines, a Python traceback, a stack trace) is the abort's, not the run's.
RUNTIME_ABORT = re.compile(
    r"^[EF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ (coordination_service\S*|client\.h):\d+\]"
)
# The last line of a traceback from a collective whose peer is gone.
PEER_GONE = re.compile(r"Gloo \S+ failed|Connection reset by peer|Connection closed by peer")
# Past the runtime's heartbeat, a process still running after a peer failed is stopped.
GRACE_SECONDS = distributed.HEARTBEAT_TIMEOUT + distributed.SHUTDOWN_TIMEOUT + 20


def free_port() -> int:
    """A TCP port free on this machine right now (the coordinator binds it moments later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def exit_status(returncode: int) -> int:
    """A ``subprocess`` return code as a shell would report it (signal S -> 128 + S)."""
    return 128 - returncode if returncode < 0 else returncode


def _ending(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit status {returncode}"


@dataclasses.dataclass
class _Child:
    index: int
    process: subprocess.Popen
    aborted_by_runtime: bool = False
    ended_at: float | None = None
    returncode: int | None = None


def _relay(child: _Child, source: IO[str], sink: IO[str], lock: threading.Lock) -> None:
    """Copy ``source`` to ``sink`` line by line, prefixed; hold back a runtime abort.

    A Python traceback is held until its last line: one that ends in a collective failing
    because a peer is gone belongs to the abort, and is dropped with it.
    """
    prefix = f"[p{child.index}] "
    held: list[str] = []

    def emit(lines: list[str]) -> None:
        if child.aborted_by_runtime:
            return
        with lock:
            sink.writelines(prefix + line for line in lines)
            sink.flush()

    for line in source:
        if RUNTIME_ABORT.match(line):
            child.aborted_by_runtime = True
        if line.startswith("Traceback (most recent call last):") or (held and line[:1].isspace()):
            held.append(line)
            continue
        if held:
            if PEER_GONE.search(line):
                child.aborted_by_runtime = True
            lines, held = [*held, line], []
            emit(lines)
            continue
        emit([line])
    emit(held)


def child_environment(
    index: int, processes: int, port: int, devices_per_process: int | None
) -> dict[str, str]:
    """This machine's environment plus what makes a process process ``index`` of the run."""
    env = dict(os.environ)
    env.update(
        {
            distributed.ENV_COORDINATOR: f"127.0.0.1:{port}",
            distributed.ENV_NUM_PROCESSES: str(processes),
            distributed.ENV_PROCESS_ID: str(index),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if devices_per_process is not None:
        flags = [
            f
            for f in env.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")
        ]
        flags.append(f"--xla_force_host_platform_device_count={devices_per_process}")
        env["XLA_FLAGS"] = " ".join(flags)
    return env


def run_processes(
    command: Sequence[str],
    processes: int,
    devices_per_process: int | None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Start ``processes`` copies of ``command``, relay their output, return the worst status."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    port = free_port()
    lock = threading.Lock()
    children: list[_Child] = []
    relays: list[threading.Thread] = []
    for index in range(processes):
        process = subprocess.Popen(
            list(command),
            env=child_environment(index, processes, port, devices_per_process),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        child = _Child(index, process)
        children.append(child)
        with lock:
            stderr.write(f"[launch] process {index}: pid {process.pid}\n")
            stderr.flush()
        for source, sink in ((process.stdout, stdout), (process.stderr, stderr)):
            relay = threading.Thread(target=_relay, args=(child, source, sink, lock), daemon=True)
            relay.start()
            relays.append(relay)
    try:
        _wait_all(children)
    finally:
        for child in children:  # interrupted: leave nothing running behind
            if child.process.poll() is None:
                child.process.kill()
                child.process.wait()
        for relay in relays:
            relay.join(timeout=5)
    _report_runtime_aborts(children, stderr)
    return max(exit_status(c.returncode) for c in children)


def _wait_all(children: list[_Child]) -> None:
    """Wait for every child; stop the stragglers ``GRACE_SECONDS`` after a failure."""
    failed_at: float | None = None
    while any(c.returncode is None for c in children):
        for child in children:
            if child.returncode is None and child.process.poll() is not None:
                child.returncode = child.process.returncode
                child.ended_at = time.monotonic()
                if child.returncode != 0 and failed_at is None:
                    failed_at = child.ended_at
        if failed_at is not None and time.monotonic() - failed_at > GRACE_SECONDS:
            for child in children:
                if child.returncode is None:
                    child.process.kill()
        time.sleep(0.05)


def first_to_die(children: Sequence[_Child]) -> _Child | None:
    """The earliest process that failed by itself (not aborted by the runtime for a peer)."""
    failed = [c for c in children if c.returncode != 0]
    own = [c for c in failed if not c.aborted_by_runtime] or failed
    return min(own, key=lambda c: c.ended_at, default=None)


def _report_runtime_aborts(children: Sequence[_Child], stderr: IO[str]) -> None:
    first = first_to_die(children)
    for child in children:
        if child.aborted_by_runtime:
            if first is None or first is child:
                cause = "the distributed runtime reported a fatal error"
            else:
                cause = f"process {first.index} died first ({_ending(first.returncode)})"
            stderr.write(
                f"[p{child.index}] stopped by the distributed runtime "
                f"({_ending(child.returncode)}): {cause}\n"
            )
    stderr.flush()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The flags of ``nozero-train launch``."""
    parser.epilog = (
        "example: nozero-train launch --processes 2 --devices-per-process 2 -- "
        "train --data DIR --out RUN"
    )
    parser.add_argument("--processes", type=int, required=True, help="processes to start")
    parser.add_argument(
        "--devices-per-process", type=int, help="forced host (CPU) devices per process"
    )
    parser.add_argument(
        "launched",
        metavar="-- COMMAND",
        nargs=argparse.REMAINDER,
        help="after --: the nozero-train command each process runs",
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Check the flags (``ValueError`` naming the bad one), then run the processes."""
    command = list(args.launched)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ValueError("give the command to run after --, e.g. -- train --data DIR --out RUN")
    if args.processes < 1:
        raise ValueError(f"--processes must be >= 1, got {args.processes}")
    if args.devices_per_process is not None and args.devices_per_process < 1:
        raise ValueError(f"--devices-per-process must be >= 1, got {args.devices_per_process}")
    if command[0] == "launch":
        raise ValueError("launch cannot launch itself")
    return run_processes(
        [sys.executable, "-m", "nozero_trainer.cli", *command],
        args.processes,
        args.devices_per_process,
    )
