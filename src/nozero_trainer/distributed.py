"""Joining a multi-process run through ``jax.distributed``, with bounded waits everywhere.

Where the processes come from: ``--coordinator HOST:PORT --num-processes N --process-id I``
(or ``NOZERO_COORDINATOR``, ``NOZERO_NUM_PROCESSES``, ``NOZERO_PROCESS_ID``, which
``nozero-train launch`` sets), else whatever cluster environment JAX detects by itself
(SLURM, Open MPI, ``JAX_COORDINATOR_ADDRESS``...). Without either, the run is one process.

JAX's runtime ends a failed join with a C++ abort and a stack trace (measured with jax
0.10.2: ``DEADLINE_EXCEEDED ... RegisterTask`` after ``initialization_timeout``), so the
join here runs under a watchdog that ends the process first, with one line saying what
did not happen (exit 2). After the join every process publishes the settings it was
started with, and all of them refuse a run whose processes disagree. CPU collectives go
through gloo. The heartbeat timeout is short, so a process that dies makes the others
abort within seconds instead of the default 100 s.

JAX is imported inside the functions, so ``nozero-train launch`` and ``--help`` stay light.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

ENV_COORDINATOR = "NOZERO_COORDINATOR"
ENV_NUM_PROCESSES = "NOZERO_NUM_PROCESSES"
ENV_PROCESS_ID = "NOZERO_PROCESS_ID"
ENV_JOIN_TIMEOUT = "NOZERO_JOIN_TIMEOUT"
ENV_HEARTBEAT_TIMEOUT = "NOZERO_HEARTBEAT_TIMEOUT"
# Cluster environments JAX's own detection reads (jax._src.clusters).
JAX_CLUSTER_VARIABLES = (
    "JAX_COORDINATOR_ADDRESS",
    "SLURM_JOB_ID",
    "OMPI_MCA_orte_hnp_uri",
    "OMPI_MCA_ess_base_jobid",
)
EXIT_JOIN_FAILED = 2
# Timeouts (seconds). A dead peer is noticed after HEARTBEAT_TIMEOUT; a failed join is
# reported after JOIN_TIMEOUT; exchanges of small host values wait at most EXCHANGE_TIMEOUT.
JOIN_TIMEOUT = 60
HEARTBEAT_TIMEOUT = 10
SHUTDOWN_TIMEOUT = 30
EXCHANGE_TIMEOUT = 120


@dataclasses.dataclass(frozen=True)
class ProcessSettings:
    """How this process joins a run; all ``None`` means "as the environment says"."""

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    join_timeout: int = JOIN_TIMEOUT
    heartbeat_timeout: int = HEARTBEAT_TIMEOUT

    @property
    def explicit(self) -> bool:
        return self.coordinator is not None

    def check(self) -> None:
        """Refuse incomplete or impossible settings before anything connects."""
        given = {
            "coordinator": self.coordinator,
            "num_processes": self.num_processes,
            "process_id": self.process_id,
        }
        missing = [k for k, v in given.items() if v is None]
        if len(missing) not in (0, 3):
            raise ValueError(
                "--coordinator, --num-processes and --process-id go together; missing: "
                + ", ".join("--" + k.replace("_", "-") for k in missing)
            )
        if self.coordinator is not None:
            host, _, port = self.coordinator.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"--coordinator must be HOST:PORT, got {self.coordinator!r}")
            if self.num_processes < 1:
                raise ValueError(f"--num-processes must be >= 1, got {self.num_processes}")
            if not 0 <= self.process_id < self.num_processes:
                raise ValueError(
                    f"--process-id must be in [0, {self.num_processes - 1}], got {self.process_id}"
                )
        for name in ("join_timeout", "heartbeat_timeout"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 second, got {getattr(self, name)}")


def settings_from(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProcessSettings:
    """Flags first, then the ``NOZERO_*`` variables; checked.

    ``NOZERO_JOIN_TIMEOUT`` and ``NOZERO_HEARTBEAT_TIMEOUT`` (seconds) fit the waits to
    the run.
    """
    environ = os.environ if environ is None else environ

    def number(value: int | None, name: str) -> int | None:
        if value is not None or name not in environ:
            return value
        try:
            return int(environ[name])
        except ValueError as err:
            raise ValueError(f"{name} must be an integer, got {environ[name]!r}") from err

    settings = ProcessSettings(
        coordinator=coordinator or environ.get(ENV_COORDINATOR),
        num_processes=number(num_processes, ENV_NUM_PROCESSES),
        process_id=number(process_id, ENV_PROCESS_ID),
        join_timeout=number(None, ENV_JOIN_TIMEOUT) or JOIN_TIMEOUT,
        heartbeat_timeout=number(None, ENV_HEARTBEAT_TIMEOUT) or HEARTBEAT_TIMEOUT,
    )
    settings.check()
    return settings


def _cluster_detected(environ: Mapping[str, str]) -> bool:
    return any(name in environ for name in JAX_CLUSTER_VARIABLES)


_joined: ProcessSettings | None = None


def joined() -> bool:
    """Whether this process is part of a multi-process run."""
    import jax

    return _joined is not None and jax.process_count() > 1


def process_index() -> int:
    """This process's index in the run (0 alone); process 0 writes the run's files."""
    import jax

    return jax.process_index()


def use_gloo() -> None:
    """CPU collectives across processes go through gloo (must precede backend start)."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")


def initialize(settings: ProcessSettings, environ: Mapping[str, str] | None = None) -> bool:
    """Join the run ``settings`` (or the detected cluster) describe; return whether joined.

    Idempotent. A join that does not complete within ``settings.join_timeout`` seconds
    ends the process with one line on stderr and exit status 2.
    """
    import jax

    global _joined
    environ = os.environ if environ is None else environ
    if _joined is not None:
        return True
    if not settings.explicit and not _cluster_detected(environ):
        return False
    use_gloo()
    where = (
        f"coordinator {settings.coordinator} as process {settings.process_id} of "
        f"{settings.num_processes}"
        if settings.explicit
        else "the detected cluster"
    )
    done = threading.Event()

    def give_up() -> None:
        if not done.wait(settings.join_timeout):
            print(
                f"nozero-train: error: could not join {where} within "
                f"{settings.join_timeout} s: the coordinator is not reachable, or not all "
                "processes started with the same --num-processes",
                file=sys.stderr,
                flush=True,
            )
            os._exit(EXIT_JOIN_FAILED)

    threading.Thread(target=give_up, name="nozero-join-watchdog", daemon=True).start()
    try:
        jax.distributed.initialize(
            coordinator_address=settings.coordinator,
            num_processes=settings.num_processes,
            process_id=settings.process_id,
            # JAX's own deadline sits past the watchdog's, so the clear line comes first.
            initialization_timeout=settings.join_timeout + 30,
            heartbeat_timeout_seconds=settings.heartbeat_timeout,
            shutdown_timeout_seconds=SHUTDOWN_TIMEOUT,
        )
    finally:
        done.set()
    _joined = settings
    _agree_on_settings(settings)
    return True


def _client() -> Any:
    # The distributed runtime's key-value store: small host values, bounded waits.
    from jax._src.distributed import global_state

    return global_state.client


def exchange(name: str, payload: Any, timeout: int = EXCHANGE_TIMEOUT) -> list[Any]:
    """Every process's JSON-ready ``payload`` under ``name``, in process order.

    One process: ``[payload]``. Every process must call it with the same ``name``; each
    name is used once per run. Waits at most ``timeout`` seconds for each peer.
    """
    import jax

    if not joined():
        return [payload]
    client = _client()
    me = jax.process_index()
    client.key_value_set(f"nozero/{name}/{me}", json.dumps(payload))
    values = []
    for process in range(jax.process_count()):
        text = client.blocking_key_value_get(f"nozero/{name}/{process}", timeout * 1000)
        values.append(json.loads(text))
    return values


def _agree_on_settings(settings: ProcessSettings) -> None:
    """Refuse a run whose processes were started with different process counts."""
    import jax

    count = jax.process_count()
    told = [
        s["num_processes"]
        for s in exchange("join", dataclasses.asdict(settings), settings.join_timeout)
    ]
    if settings.explicit and any(n != count for n in told):
        shown = ", ".join(f"process {i}: {n}" for i, n in enumerate(told))
        raise ValueError(
            f"the processes disagree on --num-processes ({shown}); the "
            f"coordinator's run has {count} processes"
        )


_barriers = 0


def barrier(name: str, timeout: int = EXCHANGE_TIMEOUT) -> None:
    """Wait until every process gets here (at most ``timeout`` s, then raise); alone: return."""
    global _barriers
    if not joined():
        return
    _barriers += 1  # every process passes the same barriers in the same order
    _client().wait_at_barrier(f"nozero/{name}/{_barriers}", timeout * 1000)


def first_error(errors: Sequence[str | None]) -> str | None:
    """The error of the lowest-numbered process that had one, tagged with that process."""
    for process, error in enumerate(errors):
        if error is not None:
            return error if len(errors) == 1 else f"{error} (on process {process})"
    return None


def raise_together(name: str, error: Exception | None) -> None:
    """Every process raises the same ``ValueError`` if any process had ``error``.

    For work each process does alone (reading its shards): one process's failure must
    stop all of them with the same message, never leave the others waiting.
    """
    message = first_error(exchange(name, None if error is None else str(error)))
    if message is not None:
        raise ValueError(message) from error
