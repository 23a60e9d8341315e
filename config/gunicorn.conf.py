"""gunicorn settings. An operator sets HOST, PORT, WEB_CONCURRENCY, WEB_THREADS, GUNICORN_TIMEOUT and LOG_LEVEL
(docs/configuration.md); the rest are the measured choices, constants here (docs/benchmarks.md#decisions)."""

import atexit
import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from config.environment import env_int, web_threads


def _int(name: str, default: int, *, minimum: int = 1) -> int:
    """``config.environment.env_int``, refusing to start with the message alone (gunicorn prints a traceback for
    anything else a conf raises)."""
    try:
        return env_int(name, default, minimum=minimum)
    except ImproperlyConfigured as refused:
        raise SystemExit(str(refused)) from None


bind = f"{os.environ.get('HOST', '127.0.0.1')}:{_int('PORT', 8000, minimum=0)}"
# One worker per core plus one, each serving WEB_THREADS requests at once (docs/benchmarks.md#decisions): as fast as
# sync workers on a checkout, and a request waiting on the payment gateway holds one thread, never the whole worker
# (the bulkhead, GATEWAY_MAX_CALLS, keeps such requests below WEB_THREADS; config/settings.py refuses otherwise).
workers = _int("WEB_CONCURRENCY", multiprocessing.cpu_count() + 1)
worker_class = "gthread"
try:
    threads = web_threads()
except ImproperlyConfigured as refused:
    raise SystemExit(str(refused)) from None
# A flash sale opens many connections at once; let them queue in the kernel instead of being refused.
backlog = 2048
# The time budget's outer bound (docs/reliability.md); the database timeouts must end well before it (skincare.W001).
timeout = _int("GUNICORN_TIMEOUT", 30)
graceful_timeout = 20
keepalive = 5
# No control socket (gunicornc): nothing here uses it, it would let whoever can reach the socket resize or stop the
# server, and every instance on a host would bind the same default path ($HOME/.gunicorn/gunicorn.ctl).
control_socket_disable = True
# No access log of gunicorn's own: the application writes one JSON line per request (ACCESS_LOG).
accesslog = None
errorlog = "-"


# Its logs (and its access log, when given on the command line) redact secret path segments (a signed sandbox link):
# skincare.logs.RedactingGunicornLogger.
logger_class = "skincare.logs.RedactingGunicornLogger"
loglevel = os.environ.get("LOG_LEVEL", "INFO").strip().lower()

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
