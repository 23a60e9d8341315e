"""What the sweeper loop (``expire_reservations --loop``) exports after each sweep, for the alert rules in
deploy/prometheus/alerts.yml: the database reachable or not, reservations overdue (the sweeper's real lag, by
the database clock), lock waiters and the oldest open transaction (``pg_stat_activity``), and every
``--audit-every`` seconds the consistency audit's result (orders.audit). Read-only statements; none takes a lock
that a checkout, a payment or a sweep waits for."""

import logging
import time

from django.db import DatabaseError, connection

from backoffice import probemetrics
from backoffice.saleboard import SWEEPER_LAG_SQL
from orders.audit import CHECKS, audit_inventory
from skincare.db import is_connection_failure

logger = logging.getLogger(__name__)

# Other client backends of this database: how many wait for a lock, and the age of the oldest open transaction.
ACTIVITY_SQL = """
    SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),
           COALESCE(max(extract(epoch FROM now() - xact_start)) FILTER (WHERE xact_start IS NOT NULL), 0)::float8
      FROM pg_stat_activity
     WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


class Probe:
    def __init__(self, *, interval: float, audit_every: float) -> None:
        self.audit_every = audit_every
        self.last_audit = float("-inf")
        probemetrics.SWEEPER_INTERVAL.set(interval)

    def run(self) -> None:
        """One probe; it never stops the sweeper for a database error: a database that cannot be reached sets
        ``skincare_database_up`` to 0, any other (a statement timeout on a huge audit, say) is logged and the
        gauges keep their last values. Anything else is a bug and is raised."""
        try:
            with connection.cursor() as cursor:
                cursor.execute(SWEEPER_LAG_SQL)
                overdue, overdue_seconds, _orders_to_reconcile, _unmatched = cursor.fetchone()
                cursor.execute(ACTIVITY_SQL)
                waiters, oldest = cursor.fetchone()
            probemetrics.RESERVATIONS_OVERDUE.set(overdue)
            probemetrics.RESERVATIONS_OVERDUE_SECONDS.set(overdue_seconds)
            probemetrics.DB_LOCK_WAITERS.set(waiters)
            probemetrics.DB_OLDEST_TRANSACTION.set(oldest)
            if self.audit_every and time.monotonic() - self.last_audit >= self.audit_every:
                self.last_audit = time.monotonic()
                export_audit()
            probemetrics.DATABASE_UP.set(1)
        except DatabaseError as exc:
            if is_connection_failure(exc):
                probemetrics.DATABASE_UP.set(0)
            else:
                logger.warning("sweeper probe failed: %s", exc)
            connection.close_if_unusable_or_obsolete()


def export_audit() -> int:
    """Run the audit (one REPEATABLE READ snapshot) and export its result; returns the violations found."""
    violations = audit_inventory()
    by_check = dict.fromkeys(CHECKS, 0)
    for violation in violations:
        by_check[violation.check] += 1
    probemetrics.export_audit(by_check, time.time())
    return len(violations)
