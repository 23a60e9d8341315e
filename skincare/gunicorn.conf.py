"""gunicorn settings; every value can be overridden from the environment."""

import atexit
import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
# One sync worker per core plus one: measured best with PostgreSQL on the same box (docs/benchmarks.md, the
# `make bench --matrix` table: 2, 3, 4, 5, 8 sync workers and gthread). More workers only add context switches.
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() + 1))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync")
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
# A flash sale opens many connections at once; let them queue in the kernel instead of being refused.
backlog = int(os.environ.get("GUNICORN_BACKLOG", "2048"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = 20
keepalive = 5
# gunicorn's own access log (off by default: the app writes one JSON line per request, see ACCESS_LOG).
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None
errorlog = "-"


# Its access log redacts secret path segments (a signed sandbox link): skincare.logs.RedactingGunicornLogger.
logger_class = "skincare.logs.RedactingGunicornLogger"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")

# Prometheus multiprocess mode: every worker writes its metric values to mmap'ed files in one directory and
# /metrics sums them. The variable must be set before a worker imports prometheus_client, i.e. here, in the
# master. The directory must start empty (stale files would add old counts): a private one is made per master
# unless PROMETHEUS_MULTIPROC_DIR is given, in which case its old *.db files are removed.
_given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _given:
    Path(_given).mkdir(parents=True, exist_ok=True)
    for stale in Path(_given).glob("*.db"):
        stale.unlink()
else:
    _made = tempfile.mkdtemp(prefix="skincare-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _made
    _master = os.getpid()

    def _remove_metrics_dir() -> None:
        if os.getpid() == _master:  # workers inherit atexit handlers from the master they were forked from
            shutil.rmtree(_made, ignore_errors=True)

    atexit.register(_remove_metrics_dir)


def child_exit(server: Any, worker: Any) -> None:
    """A dead worker's live gauges must stop counting (its counters stay: they are totals)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
