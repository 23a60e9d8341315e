"""``manage.py migrate`` that is safe to run during a sale: short lock waits, bounded retries.

Django's own command, with two differences:

- every statement it sends waits at most ``MIGRATION_LOCK_TIMEOUT_MS`` for its lock (``lock_timeout``, set on the
  migration's connection, every time one is opened). A schema change that needs ``ACCESS EXCLUSIVE`` on ``orders``
  waits behind the checkouts in flight, and while it waits every later checkout queues behind it: a short bound turns
  that queue into a failed attempt instead of a stopped shop;
- a migration refused a lock (``LockNotAvailable``, SQLSTATE 55P03) was rolled back (an atomic migration) and the
  command runs again, ``MIGRATION_ATTEMPTS`` times in all, ``MIGRATION_RETRY_PAUSE_MS`` apart; the migrations
  already applied are not applied twice (Django records each one). A non-atomic migration (``CONCURRENTLY``) must be
  written to be run again (``IF NOT EXISTS`` / ``IF EXISTS``).

Last, it sets the application role's default ``lock_timeout`` and ``statement_timeout`` in this database from
``DB_LOCK_TIMEOUT_MS`` and ``DB_STATEMENT_TIMEOUT_MS`` (``skincare.db.role_timeouts_set``): behind PgBouncer they bound
every statement outside a service transaction (reads included); the start-up check ``skincare.E014`` refuses a
pooled process without them.

Migrations talk to PostgreSQL directly: behind PgBouncer in transaction mode a session ``SET`` would apply to
whichever client gets that server connection next, so ``DB_PGBOUNCER=true`` is refused here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg.errors
from django.conf import settings
from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import OperationalError, connections
from django.db.backends.signals import connection_created

from skincare.db import role_timeouts_set

SET_MIGRATION_TIMEOUTS = "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)"
RESET_TIMEOUTS = "RESET lock_timeout; RESET statement_timeout"

T = TypeVar("T")


def is_lock_refused(error: BaseException) -> bool:
    """Whether ``error`` is PostgreSQL's "lock not available" (lock_timeout ran out), as Django raises it."""
    return isinstance(error, OperationalError) and isinstance(error.__cause__, psycopg.errors.LockNotAvailable)


def _apply_timeouts(connection: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            SET_MIGRATION_TIMEOUTS,
            [f"{settings.MIGRATION_LOCK_TIMEOUT_MS}ms", f"{settings.MIGRATION_STATEMENT_TIMEOUT_MS}ms"],
        )


@contextlib.contextmanager
def migration_timeouts(alias: str) -> Iterator[None]:
    """The migration's bounds on connection ``alias``: now if it is open, and on every connection opened meanwhile."""
    connection = connections[alias]

    def on_connect(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.alias == alias:
            _apply_timeouts(connection)

    connection_created.connect(on_connect, weak=False)
    try:
        if connection.connection is not None:
            _apply_timeouts(connection)
        yield
    finally:
        connection_created.disconnect(on_connect)
        if connection.connection is not None and not connection.in_atomic_block:
            with connection.cursor() as cursor:
                cursor.execute(RESET_TIMEOUTS)


def run_with_lock_retries(
    run: Callable[[], T], *, attempts: int, pause_seconds: float, on_retry: Callable[[int, BaseException], None]
) -> T:
    """``run()``, again after a refused lock, ``attempts`` times in all; any other error, or the last refusal, is
    raised. ``on_retry(attempt, error)`` is told before each pause."""
    for attempt in range(1, attempts + 1):
        try:
            return run()
        except OperationalError as error:
            if not is_lock_refused(error) or attempt == attempts:
                raise
            on_retry(attempt, error)
            time.sleep(pause_seconds)  # back off: the checkouts holding the lock finish meanwhile
    raise AssertionError("unreachable: attempts >= 1")


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " Each lock is waited for briefly, and a refused one retried (safe during a sale)."

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PGBOUNCER:
            raise CommandError(
                "migrate talks to PostgreSQL directly, not through PgBouncer: run it with the primary's "
                "DATABASE_URL and DB_PGBOUNCER unset (a session lock_timeout cannot cross a transaction-mode pooler)"
            )
        attempts = settings.MIGRATION_ATTEMPTS

        def retrying(attempt: int, error: BaseException) -> None:
            self.stderr.write(
                f"migrate: a lock was not granted within {settings.MIGRATION_LOCK_TIMEOUT_MS} ms "
                f"(attempt {attempt} of {attempts}: {str(error).strip()}); the migration was rolled back, "
                f"trying again in {settings.MIGRATION_RETRY_PAUSE_MS} ms"
            )

        def once() -> None:
            with migration_timeouts(options["database"]):
                super(Command, self).handle(*args, **options)

        run_with_lock_retries(
            once, attempts=attempts, pause_seconds=settings.MIGRATION_RETRY_PAUSE_MS / 1000, on_retry=retrying
        )
        if not (options["plan"] or options["check_unapplied"]):  # the role's bounds behind PgBouncer (skincare.db)
            role_timeouts_set(
                lock_timeout_ms=settings.DB_LOCK_TIMEOUT_MS, statement_timeout_ms=settings.DB_STATEMENT_TIMEOUT_MS
            )
