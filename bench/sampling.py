"""CPU over one cell, from /proc (psutil): the gunicorn workers', PostgreSQL's (the postmaster and every process it
started, the ones that exited meanwhile included), the load generator's, and what other processes on the machine
used (a shared machine: that column says how noisy the cell was)."""

import contextlib
import subprocess
import time
from collections.abc import Iterable
from typing import Any

import psutil

from devtools.processes import ROOT


def _cpu(proc: psutil.Process | None, *, children: bool = False) -> float:
    """User + system CPU seconds of ``proc`` (with its exited children's when ``children``); 0 once it is gone."""
    if proc is None:
        return 0.0
    with contextlib.suppress(psutil.NoSuchProcess):
        t = proc.cpu_times()
        return t.user + t.system + ((t.children_user + t.children_system) if children else 0.0)
    return 0.0


def postmaster() -> psutil.Process | None:
    """The embedded server's postmaster (None when the database runs elsewhere: DATABASE_URL)."""
    with contextlib.suppress(Exception):
        return psutil.Process(int((ROOT / ".data/pg/postmaster.pid").read_text().split()[0]))
    return None


def postgres_cpu_seconds() -> float:
    """CPU seconds of the embedded PostgreSQL so far: the postmaster, its live children, the exited ones."""
    master = postmaster()
    total = _cpu(master, children=True)
    for child in master.children() if master else []:
        total += _cpu(child)
    return total


def _busy_seconds() -> float:
    t = psutil.cpu_times()
    return t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)


def wait_sampling(proc: subprocess.Popen[str], workers: Iterable[int]) -> dict[str, Any]:
    """Wait for the load generator ``proc`` to exit; the CPU each party used meanwhile (seconds; the load generator's
    and the other processes' as % of one core)."""
    workers = [psutil.Process(pid) for pid in workers]
    loadgen = psutil.Process(proc.pid)
    t0, busy0, pg0 = time.monotonic(), _busy_seconds(), postgres_cpu_seconds()
    w0 = sum(_cpu(w) for w in workers)
    loadgen_cpu = 0.0
    while proc.poll() is None:
        loadgen_cpu = _cpu(loadgen) or loadgen_cpu  # its last reading before it exits
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    worker_s = sum(_cpu(w) for w in workers) - w0
    pg_s = postgres_cpu_seconds() - pg0
    other_s = max(0.0, _busy_seconds() - busy0 - worker_s - pg_s - loadgen_cpu)
    return {
        "worker_cpu_s": worker_s,
        "postgres_cpu_s": pg_s,
        "loadgen_cpu_pct": round(100 * loadgen_cpu / elapsed, 1),
        "other_cpu_pct": round(100 * other_s / elapsed, 1),
    }
