"""Resource sampling during a benchmark run (psutil, i.e. /proc): CPU and peak RSS of the gunicorn workers, CPU of
PostgreSQL (postmaster and its backends), of the load generator and of the whole machine; and waiting for an idle
machine before a run, since other jobs skew a 2-core benchmark."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from devtools.processes import ROOT

if TYPE_CHECKING:
    import psutil


def cpu_seconds(proc: psutil.Process) -> float | None:
    """User + system CPU seconds of ``proc``; None once it has exited."""
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        t = proc.cpu_times()
        return t.user + t.system
    return None


class Sampler:
    """CPU (from cpu_times deltas) and peak RSS (sampled every 0.25 s) of the gunicorn workers, PostgreSQL
    (postmaster, live backends and the backends that exited meanwhile), the load generator, and the machine."""

    def __init__(self, worker_pids: Iterable[int] = (), loadgen_pid: int | None = None) -> None:
        import psutil

        self.psutil = psutil
        self.workers = [psutil.Process(pid) for pid in worker_pids]
        self.loadgen = psutil.Process(loadgen_pid) if loadgen_pid else None
        self.postmaster = self._postmaster()
        self.peak_rss = {p.pid: 0 for p in self.workers}
        self._stop = threading.Event()

    def _postmaster(self) -> psutil.Process | None:
        with contextlib.suppress(Exception):
            pid = int((ROOT / ".data/pg/postmaster.pid").read_text().split()[0])
            return self.psutil.Process(pid)
        return None

    def _pg_cpu(self) -> float:
        if self.postmaster is None:
            return 0.0
        t = self.postmaster.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in self.postmaster.children():
            with contextlib.suppress(self.psutil.NoSuchProcess):
                c = child.cpu_times()
                total += c.user + c.system
        return total

    def _cpu(self, proc: psutil.Process) -> float:
        return cpu_seconds(proc) or 0.0

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            for p in self.workers:
                with contextlib.suppress(self.psutil.NoSuchProcess):
                    self.peak_rss[p.pid] = max(self.peak_rss[p.pid], p.memory_info().rss)

    def start(self) -> Sampler:
        self.t0 = time.monotonic()
        self.w0 = {p.pid: self._cpu(p) for p in self.workers}
        self.pg0 = self._pg_cpu()
        self.lg0 = self._cpu(self.loadgen) if self.loadgen else 0.0
        self.sys0 = self.psutil.cpu_times()
        for p in self.workers:
            with contextlib.suppress(self.psutil.NoSuchProcess):
                self.peak_rss[p.pid] = p.memory_info().rss
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def finish(self, loadgen_cpu: float | None = None) -> dict[str, Any]:
        self._stop.set()
        self.thread.join()
        elapsed = time.monotonic() - self.t0
        sys1 = self.psutil.cpu_times()
        busy = lambda t: t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)  # noqa: E731
        sys_busy = (busy(sys1) - busy(self.sys0)) / max((sum(sys1) - sum(self.sys0)), 1e-9)  # fraction of all cores
        worker_cpu = [100 * (self._cpu(p) - self.w0[p.pid]) / elapsed for p in self.workers]
        return {
            "worker_cpu_pct": [round(c, 1) for c in worker_cpu],
            "worker_cpu_pct_mean": round(statistics.mean(worker_cpu), 1) if worker_cpu else None,
            "worker_peak_rss_mb": [round(r / 2**20, 1) for r in self.peak_rss.values()],
            "worker_peak_rss_mb_max": round(max(self.peak_rss.values()) / 2**20, 1) if self.peak_rss else None,
            "postgres_cpu_pct": round(100 * (self._pg_cpu() - self.pg0) / elapsed, 1),
            "loadgen_cpu_pct": round(100 * loadgen_cpu / elapsed, 1) if loadgen_cpu is not None else None,
            "machine_cpu_pct": round(100 * sys_busy * self.psutil.cpu_count(), 1),  # 200 = both cores busy
        } | {
            # what neither the workers, PostgreSQL nor the load generator used: other processes on the machine
            "other_cpu_pct": round(
                max(
                    0.0,
                    100 * sys_busy * self.psutil.cpu_count()
                    - sum(worker_cpu)
                    - 100 * (self._pg_cpu() - self.pg0) / elapsed
                    - (100 * loadgen_cpu / elapsed if loadgen_cpu is not None else 0),
                ),
                1,
            )
        }


def wait_sampling(proc: subprocess.Popen[str], workers: Iterable[int]) -> dict[str, Any]:
    """Sample the workers' and the load generator's resources until ``proc`` (the load generator) exits."""
    import psutil

    loadgen = psutil.Process(proc.pid)
    sampler = Sampler(workers, proc.pid).start()
    last_cpu = 0.0
    while proc.poll() is None:
        cpu = cpu_seconds(loadgen)
        if cpu is not None:
            last_cpu = cpu
        time.sleep(0.2)
    return sampler.finish(loadgen_cpu=last_cpu)


def wait_for_quiet(max_wait: float) -> float:
    """Wait (at most ``max_wait`` s) until the machine is nearly idle: other jobs skew a 2-core benchmark."""
    import psutil

    deadline = time.monotonic() + max_wait
    busy = psutil.cpu_percent(interval=1.0)
    while busy > 25 and time.monotonic() < deadline:
        busy = psutil.cpu_percent(interval=2.0)
    return busy
