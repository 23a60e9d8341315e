"""Database helpers shared by every app: the transaction runner (transient-error retries, per-transaction timeouts
behind PgBouncer, the isolation level), the atomic block whose refusals commit while nothing was written (the
checkout's), outage detection, the database clock. The lock order is docs/locking.md; its advisory keys are ``skincare.locks``'."""

import functools
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn, ParamSpec, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, models, transaction

from skincare import metrics
from skincare.errors import DatabaseUnavailable, DomainError, ServiceBusy

logger = logging.getLogger(__name__)
slow_logger = logging.getLogger("skincare.db.slow")

# A transaction that lost a deadlock or a serialization race can simply be run again from the start.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
# Waited too long for a lock or a statement: the caller should come back later (503 + Retry-After).
BUSY_SQLSTATES = frozenset({"55P03", "57014"})
# The database went away: shut down by an administrator (57P01), crashed (57P02), not accepting connections yet
# (57P03, starting up or shutting down). Class 08 (connection exception) is matched by its prefix, and an error
# without any SQLSTATE is one that libpq raised itself: the server could not be reached or the socket broke.
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})

P = ParamSpec("P")
R = TypeVar("R")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database exception raised through Django, or None."""
    cause: BaseException | None = exc
    while cause is not None:
        code = getattr(cause, "sqlstate", None)
        if code:
            return code
        cause = cause.__cause__
    return None


def is_connection_failure(exc: BaseException) -> bool:
    """True when ``exc`` means the database cannot be reached (down, restarting, connection lost), as opposed to
    an error in what was asked of it. Only Django's/psycopg's OperationalError and InterfaceError qualify."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    code = sqlstate(exc)
    return code is None or code.startswith("08") or code in UNAVAILABLE_SQLSTATES


# Both settings in ONE statement, and transaction-local (``is_local = true`` is ``SET LOCAL``): they end with the
# transaction, so nothing leaks into the next client of a server connection behind a transaction-mode pooler
# (PgBouncer), where the libpq ``options`` startup parameter is refused (1.18) or silently dropped.
SAVEPOINT_SQL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")
TIMEOUTS_SQL = "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)"


# Behind PgBouncer every other statement (reads in autocommit: queue polls, the sale board, the admin, metrics) is
# bounded by the database's own defaults for the application's role in its database, which every server connection
# the pooler opens starts with: ``manage.py migrate`` (a direct connection) sets them from the settings
# (:func:`role_timeouts_set`), and the start-up check ``skincare.E014`` refuses a pooled process whose connection
# reports none, or looser ones (:data:`SESSION_TIMEOUTS_SQL`, in milliseconds; 0 is none).
ROLE_TIMEOUTS_SQL = "ALTER ROLE CURRENT_USER IN DATABASE {database} SET {name} = {value}"
SESSION_TIMEOUTS_SQL = (
    "SELECT current_setting('lock_timeout')::interval, current_setting('statement_timeout')::interval"
)


def role_timeouts_set(*, lock_timeout_ms: int, statement_timeout_ms: int) -> None:
    """The application role's default ``lock_timeout``/``statement_timeout`` in the current database: every new
    session of the role there starts with them (a PgBouncer server connection included) unless its startup options
    say otherwise. ``ALTER ROLE`` takes no bind parameters: the values are integers, the name is quoted."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        database = connection.ops.quote_name(cursor.fetchone()[0])
        for name, value in (("lock_timeout", lock_timeout_ms), ("statement_timeout", statement_timeout_ms)):
            cursor.execute(ROLE_TIMEOUTS_SQL.format(database=database, name=name, value=f"'{int(value)}ms'"))


def session_timeouts_ms() -> tuple[int, int]:
    """This connection's ``(lock_timeout, statement_timeout)`` in milliseconds (0: unbounded)."""
    with connection.cursor() as cursor:
        cursor.execute(SESSION_TIMEOUTS_SQL)
        lock, statement = cursor.fetchone()
    return int(lock.total_seconds() * 1000), int(statement.total_seconds() * 1000)


def is_busy(exc: BaseException) -> bool:
    """True when ``exc`` is a lock or statement timeout (:data:`BUSY_SQLSTATES`), wherever it was raised."""
    return isinstance(exc, OperationalError) and sqlstate(exc) in BUSY_SQLSTATES


def transaction_timeouts() -> tuple[str, str]:
    """The ``(lock_timeout, statement_timeout)`` values (milliseconds, as text) for a service transaction."""
    return str(settings.DB_LOCK_TIMEOUT_MS), str(settings.DB_STATEMENT_TIMEOUT_MS)


class _TimeoutsOnFirstStatement:
    """A Django execute wrapper that sends :data:`TIMEOUTS_SQL` right before the first statement that runs inside
    the transaction, so every ``retry_transient`` service gets its bounds without a line of its own."""

    def __init__(self) -> None:
        self.applied = False

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        # Savepoint bookkeeping (an outer transaction) is not the service's first statement: a service that ends up
        # sending nothing (e.g. a sold-out refusal from memory) must not pay for the timeouts either.
        if not self.applied and context["connection"].in_atomic_block and not sql.startswith(SAVEPOINT_SQL):
            self.applied = True  # first, so the statement below passes through this wrapper untouched
            context["cursor"].execute(TIMEOUTS_SQL, list(transaction_timeouts()))
        return execute(sql, params, many, context)


# A checkout's statements are the same text with other values every time, and their best plan does not depend on
# the values (primary-key lookups, inserts, one product's stock rows). PostgreSQL's default (plan_cache_mode =
# auto) still plans the quote read and ORDER_SQL afresh on every call even once prepared: a custom plan can fold away
# the branches the values switch off ("max_pending > 0", an empty limited_ids), so it always looks cheaper than the
# generic one (pg_prepared_statements shows 0 generic plans after any number of checkouts). Transaction-local
# (``is_local = true``): the setting ends with the checkout's transaction, so a statement whose plan does depend on
# its values (the sale board's ``m.id > cutoff``) keeps its custom plan on the same connection.
GENERIC_PLANS_SQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"


def generic_plans() -> None:
    """For the rest of the current transaction, a prepared statement runs its generic plan (planned once per
    connection) instead of being planned again (docs/benchmarks.md#decisions). Only with server-side prepared
    statements (``DB_PREPARED_STATEMENTS``): with values bound on the client there is nothing to reuse, and the
    statement would be a round trip for nothing."""
    if settings.DB_PREPARED_STATEMENTS:
        with connection.cursor() as cursor:
            cursor.execute(GENERIC_PLANS_SQL)


class RestartTransaction(Exception):
    """The one signal the transaction runner (:func:`retry_transient`) restarts on: it rolls the transaction back and
    runs it again from the start.

    A service raises it when it lost an optimistic race (``give_up`` is then the domain error the client sees once
    ``max_attempts`` attempts have failed), or when the transaction turns out to need a stricter ``isolation``
    level (a product whose strategy is SERIALIZABLE: raised before anything is written, the next attempt runs at
    that level, and it is not counted as an attempt). The runner makes one itself from PostgreSQL's deadlock or
    serialization failure (:func:`restart_signal`). ``label`` names the cause in
    ``skincare_db_transaction_retries_total{sqlstate}``."""

    def __init__(
        self,
        reason: str,
        *,
        give_up: Exception | None = None,
        max_attempts: int = 1,
        isolation: str | None = None,
        label: str = "version",
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.give_up = give_up
        self.max_attempts = max_attempts
        self.isolation = isolation
        self.label = label


def restart_signal(exc: BaseException) -> RestartTransaction | None:
    """The restart ``exc`` asks for, or None: a :class:`RestartTransaction`, or a deadlock or serialization failure
    (:data:`RETRYABLE_SQLSTATES`, which can surface at COMMIT too), retried up to ``DB_TRANSIENT_RETRIES`` more times,
    then :class:`ServiceBusy`."""
    if isinstance(exc, RestartTransaction):
        return exc
    code = sqlstate(exc) if isinstance(exc, OperationalError) else None
    if code is None or code not in RETRYABLE_SQLSTATES:
        return None
    return RestartTransaction(code, give_up=ServiceBusy(), max_attempts=settings.DB_TRANSIENT_RETRIES + 1, label=code)


SERIALIZABLE = "serializable"


def current_isolation() -> str | None:
    """The isolation level the runner set for this transaction (``"serializable"``), or None for the default."""
    raw = connection.connection
    level = getattr(raw, "isolation_level", None) if raw is not None else None
    return SERIALIZABLE if level is not None and level.name == "SERIALIZABLE" else None


@contextmanager
def _isolation(level: str | None) -> Iterator[None]:
    """Run the next transaction at ``level`` (psycopg sends ``BEGIN ISOLATION LEVEL …``: no extra round trip)."""
    if level is None:
        yield
        return
    from psycopg import IsolationLevel

    connection.ensure_connection()
    raw = connection.connection
    previous = raw.isolation_level
    raw.isolation_level = IsolationLevel.SERIALIZABLE
    try:
        yield
    finally:
        if connection.connection is raw and not raw.closed:
            raw.isolation_level = previous


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, 0.01 * attempt))  # noqa: S311 - jittered backoff, not crypto


def retry_transient(func: Callable[P, R]) -> Callable[P, R]:
    """The one transaction runner: runs a whole ``@transaction.atomic`` service, and runs it again from the start on
    the one restart signal (:func:`restart_signal`: a :class:`RestartTransaction`, or PostgreSQL's deadlock or
    serialization failure), up to the bound the signal carries, then the error it carries. Backoff between attempts
    is jittered. Inside an outer transaction nothing can be retried, so the signal is passed on for the outermost
    caller to handle.

    Lock and statement timeouts become :class:`ServiceBusy`. A lost connection becomes :class:`DatabaseUnavailable`
    and is never retried: if it broke during COMMIT, only the database knows whether the transaction committed, and
    running it again could do the work twice.

    Behind PgBouncer (``DB_PGBOUNCER=true``), each attempt's transaction starts with ``SET LOCAL
    lock_timeout/statement_timeout`` (see :data:`TIMEOUTS_SQL`), sent just before its first statement; connected
    directly, the connection's startup options carry the same bounds and no statement is added (one round trip
    less per transaction: docs/benchmarks.md). Retries are counted in
    ``skincare_db_transaction_retries_total{sqlstate}``; an attempt slower than ``DB_SLOW_TRANSACTION_MS`` is
    logged as a warning.
    """

    def attempt_once(args: Any, kwargs: Any, isolation: str | None, attempt: int) -> R:
        started = time.perf_counter()
        try:
            with _isolation(isolation):
                if not settings.PGBOUNCER:  # direct: the connection's startup options already bound it
                    return func(*args, **kwargs)
                with connection.execute_wrapper(_TimeoutsOnFirstStatement()):
                    return func(*args, **kwargs)
        finally:
            _log_if_slow(func.__qualname__, started=started, attempt=attempt)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        attempt, isolation = 1, None
        while True:
            try:
                return attempt_once(args, kwargs, isolation, attempt)
            except Exception as exc:
                restart = restart_signal(exc)
                if connection.in_atomic_block:
                    raise
                if restart is None:
                    _raise_unretryable(func.__qualname__, exc)
                    raise
                if restart.isolation is not None:
                    if isolation == restart.isolation:
                        raise
                    isolation = restart.isolation  # not an attempt: nothing was written
                    continue
                if attempt >= restart.max_attempts:
                    _give_up(func.__qualname__, restart, attempt, exc)
                metrics.DB_RETRIES.labels(sqlstate=restart.label).inc()
                logger.info("%s: retrying after %s (attempt %d)", func.__qualname__, restart.reason, attempt)
                _backoff(attempt)
                attempt += 1

    return wrapper


def _raise_unretryable(name: str, exc: Exception) -> None:
    """A lost connection → :class:`DatabaseUnavailable`; a lock or statement timeout → :class:`ServiceBusy`; any
    other exception returns, for the runner to re-raise as it is."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return
    code = sqlstate(exc)
    if is_connection_failure(exc):
        logger.warning("%s: database unavailable (%s): %s", name, code, exc)
        raise DatabaseUnavailable() from exc
    if code in BUSY_SQLSTATES:
        metrics.DB_BUSY.labels(sqlstate=code).inc()
        logger.warning("%s: database busy (%s)", name, code)
        raise ServiceBusy() from exc


def _give_up(name: str, restart: RestartTransaction, attempts: int, exc: Exception) -> NoReturn:
    """The restart's bound is spent: its ``give_up`` error (a deadlock's: :class:`ServiceBusy`, counted as busy)."""
    if isinstance(restart.give_up, ServiceBusy):
        metrics.DB_BUSY.labels(sqlstate=restart.label).inc()
    logger.warning("%s: gave up after %d attempts (%s)", name, attempts, restart.reason)
    raise (restart.give_up or ServiceBusy()) from exc


def _log_if_slow(name: str, *, started: float, attempt: int) -> None:
    elapsed_ms = (time.perf_counter() - started) * 1000
    if elapsed_ms > settings.DB_SLOW_TRANSACTION_MS:
        slow_logger.warning(
            "slow transaction %s: %.0f ms (attempt %d)",
            name,
            elapsed_ms,
            attempt,
            extra={"transaction": name, "duration_ms": round(elapsed_ms, 1)},
        )


# Has this transaction written anything? PostgreSQL gives a transaction its id at its first write (a row inserted,
# updated, deleted or locked) and not before: NULL means COMMIT and ROLLBACK would leave the same database.
WROTE_NOTHING_SQL = "SELECT pg_current_xact_id_if_assigned() IS NULL"


def _wrote_nothing() -> bool:
    """True when this transaction has certainly written nothing and may end with COMMIT instead of ROLLBACK: it is
    healthy (no statement failed, Django has not marked it for rollback), it runs at the default isolation (a
    SERIALIZABLE one's reads still count against concurrent writers until it ends, so it keeps ROLLBACK), and
    PostgreSQL has not given it a transaction id (:data:`WROTE_NOTHING_SQL`). A transaction that sent nothing needs
    no question. Only asked about an outermost transaction (:func:`atomic_refusals_commit`)."""
    from psycopg.pq import TransactionStatus

    raw = connection.connection
    if raw is None or transaction.get_rollback() or current_isolation() == SERIALIZABLE:
        return False
    status = raw.info.transaction_status
    if status == TransactionStatus.IDLE:  # nothing sent yet (e.g. refused from the sold-out memory): no BEGIN
        return True
    if status != TransactionStatus.INTRANS:
        return False
    with connection.cursor() as cursor:
        cursor.execute(WROTE_NOTHING_SQL)
        return bool(cursor.fetchone()[0])


def atomic_refusals_commit(func: Callable[P, R]) -> Callable[P, R]:
    """``@transaction.atomic``, except that a refusal (a :class:`DomainError`) raised before the transaction wrote
    anything ends it with COMMIT instead of ROLLBACK (:func:`_wrote_nothing`), and then reaches the caller as
    before. Nothing was written, so the database is the same either way; what differs is the connection: psycopg
    forgets every prepared statement of a connection at each ROLLBACK (``DEALLOCATE ALL``, one more round trip,
    and the statements run unprepared again until ``DB_PREPARE_THRESHOLD``), so a storm of refusals decided by a
    read (sold out, outside the sale window, no admission, over a limit) would keep the checkout's statements
    unprepared. A refusal after a write, and every other exception, rolls back as ``transaction.atomic`` does; so
    does any refusal inside an outer transaction (a savepoint's: what matters is how the outermost one ends, and the
    transaction id would be the outer one's).
    Costs one short statement per refusal that reached the database (the question), against ROLLBACK's
    ``DEALLOCATE ALL``. Use it under :func:`retry_transient` in place of ``@transaction.atomic`` (the checkout:
    ``checkout/services.py``); docs/benchmarks.md#decisions has the numbers."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        outermost = not connection.in_atomic_block
        with transaction.atomic():
            try:
                return func(*args, **kwargs)
            except DomainError as exc:
                if not outermost or not _wrote_nothing():
                    raise
                refusal = exc
        raise refusal  # after the COMMIT

    return wrapper


class TransactionNow(models.Func):
    """PostgreSQL's ``now()``: the start time of the current transaction, by the database's clock.
    (Django's ``Now()`` compiles to ``STATEMENT_TIMESTAMP()``; expiry decisions here use ``now()``, so every
    statement of one transaction sees the same instant.)"""

    template = "now()"
    output_field = models.DateTimeField()


def db_now() -> datetime:
    """The database's clock (``now()``: inside a transaction, the transaction's start time)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]
