"""Health checks for persistent connections that were idle: the cheap middle ground between Django's two choices.

Django's ``CONN_HEALTH_CHECKS`` sends ``SELECT 1`` before the first query of **every** request on a reused
connection. Under a flash sale that round trip is pure cost (`make bench`: +11-22 % sold-out answers per second
without it), because a connection that served a request a moment ago is alive. Without health checks, a connection
that died while its worker was idle (a database restart) answers one ``503 database_unavailable`` before it is
replaced. So: a connection is health-checked at the start of a request only when it has been idle for more than
``CHECK_AFTER_IDLE_SECONDS`` (Django's own check on every request stays off: ``CONN_HEALTH_CHECKS`` in
config/settings.py). A busy worker never pays for it; a worker that sat through an outage reconnects before its
first query.

A connection that failed *during* a request is handled by Django itself: errors mark it, and it is closed when the
request ends (and the request answered 503, see ``skincare.api``).
"""

import time
from typing import Any

from django.core.signals import request_finished, request_started
from django.db import connections

_ATTRIBUTE = "_skincare_idle_since"
# A connection idle longer than this is checked before a request uses it (docs/benchmarks.md#decisions): under a
# sale a worker's connection is never idle that long, so the check costs nothing when it matters.
CHECK_AFTER_IDLE_SECONDS = 0.25


def _check_idle_connections(**kwargs: Any) -> None:
    """``request_started`` (after Django's own ``close_old_connections``): every open connection that has been idle
    longer than the threshold is checked now, before the request opens a transaction on it, and closed if it is dead,
    so the request's first query reconnects. (Django's own check runs at the first cursor, which for a checkout is
    inside ``transaction.atomic``, where a dead connection can only fail the request.)"""
    now = time.monotonic()
    threshold = CHECK_AFTER_IDLE_SECONDS
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block:
            continue
        idle_since = getattr(conn, _ATTRIBUTE, None)
        if idle_since is not None and now - idle_since <= threshold:
            continue
        if not conn.is_usable():
            conn.close()
        else:
            conn.health_check_done = True  # just checked: Django's per-request check need not run again


def _mark_idle(**kwargs: Any) -> None:
    """``request_finished``: the connections go idle now."""
    now = time.monotonic()
    for conn in connections.all(initialized_only=True):
        setattr(conn, _ATTRIBUTE, now)


def connect_signals() -> None:
    request_started.connect(_check_idle_connections, dispatch_uid="skincare.connections.check_idle")
    request_finished.connect(_mark_idle, dispatch_uid="skincare.connections.mark_idle")
