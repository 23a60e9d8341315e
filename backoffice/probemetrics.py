"""Gauges that only the sweeper loop (``expire_reservations --loop``, backoffice/sweeper_probes.py) sets and serves on
its metrics port, so that a Prometheus scraping the sweepers sees the database as they do (alert rules:
deploy/prometheus/alerts.yml). A module of their own, imported by the sweeper only: in a web worker an unset
gauge would be exported as 0 (``skincare_database_up 0`` would read as "database down").
"""

from prometheus_client import Gauge

AUDIT_VIOLATIONS = Gauge(
    "skincare_audit_violations",
    "Rows the last consistency audit (orders.audit) found violating each check (0 = consistent).",
    ["check"],
    multiprocess_mode="livemax",
)
AUDIT_LAST_RUN = Gauge(
    "skincare_audit_last_run_timestamp_seconds",
    "Unix time the last consistency audit finished (alert when it stops moving).",
    multiprocess_mode="livemax",
)

SWEEPER_INTERVAL = Gauge(
    "skincare_sweeper_interval_seconds",
    "The sweeper loop's --interval (alert when the last sweep is several intervals old).",
    multiprocess_mode="livemax",
)
DATABASE_UP = Gauge(
    "skincare_database_up",
    "1 when the sweeper's last probe query reached the database, 0 when the database was unavailable.",
    multiprocess_mode="livemin",
)
RESERVATIONS_OVERDUE = Gauge(
    "skincare_reservations_overdue",
    "Active reservations past their expires_at (database clock) at the last probe: work the sweeper has not done.",
    multiprocess_mode="livemax",
)
RESERVATIONS_OVERDUE_SECONDS = Gauge(
    "skincare_reservations_oldest_overdue_seconds",
    "How far the database clock is past the oldest active reservation's expires_at (0 when none is due).",
    multiprocess_mode="livemax",
)
DB_LOCK_WAITERS = Gauge(
    "skincare_db_lock_waiters",
    "Backends of this database waiting for a heavyweight lock (row locks: stock rows, orders) at the last probe.",
    multiprocess_mode="livemax",
)
DB_OLDEST_TRANSACTION = Gauge(
    "skincare_db_oldest_transaction_seconds",
    "Age of the oldest open transaction of another backend of this database at the last probe.",
    multiprocess_mode="livemax",
)


def export_audit(violations_by_check: dict[str, int], finished_at: float) -> None:
    """Set the audit gauges (one series per check, 0 when it passed)."""
    for check, found in violations_by_check.items():
        AUDIT_VIOLATIONS.labels(check=check).set(found)
    AUDIT_LAST_RUN.set(finished_at)
