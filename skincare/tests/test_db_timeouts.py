"""Behind PgBouncer every retry_transient service transaction sets its own lock/statement timeouts with SET LOCAL
(one statement, sent before its first one), so the bounds hold behind a transaction-mode pooler and end with the
transaction. Connected directly, the connection's startup options carry the bounds and nothing is added."""

import threading

import pytest
from django.db import connection, transaction

from skincare.checks import POOLED_TIMEOUTS, pooled_connection_timeouts
from skincare.db import retry_transient


def show(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_service_transactions_set_local_timeouts_from_settings(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PGBOUNCER = True
    settings.DB_LOCK_TIMEOUT_MS = 1234
    settings.DB_STATEMENT_TIMEOUT_MS = 5678
    executed: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        executed.append(sql)
        return execute(sql, params, many, context)

    @retry_transient
    @transaction.atomic
    def service() -> tuple[str, str]:
        with connection.execute_wrapper(record):  # innermost: sees statements in the order they are sent
            return show("lock_timeout"), show("statement_timeout")

    inside = service()
    outside = show("lock_timeout"), show("statement_timeout")

    assert inside == ("1234ms", "5678ms")
    assert outside != inside  # SET LOCAL ended with the transaction
    assert executed[0].startswith("SELECT set_config('lock_timeout'")  # one extra statement, first
    assert sum("set_config" in sql for sql in executed) == 1


@pytest.mark.django_db(transaction=True)
def test_direct_connections_are_bounded_by_their_startup_options_without_an_extra_statement(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PGBOUNCER = False
    executed: list[str] = []

    def record(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        executed.append(sql)
        return execute(sql, params, many, context)

    @retry_transient
    @transaction.atomic
    def service() -> tuple[str, str]:
        with connection.execute_wrapper(record):
            return show("lock_timeout"), show("statement_timeout")

    lock, statement = service()

    assert lock == f"{settings.DB_LOCK_TIMEOUT_MS // 1000}s" or lock == f"{settings.DB_LOCK_TIMEOUT_MS}ms"
    assert statement not in ("0", "0ms")
    assert not any("set_config" in sql for sql in executed)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("lock", "statement", "refused"),
    [
        ("0", "1s", ["lock_timeout is unbounded"]),
        ("1s", "0", ["statement_timeout is unbounded"]),
        ("2s", "1s", ["lock_timeout is 2000 ms"]),
        ("1s", "2s", ["statement_timeout is 2000 ms"]),
        ("1s", "1s", []),
        ("500ms", "200ms", []),
    ],
)
def test_a_pooled_process_refuses_a_connection_without_bounds_or_with_looser_ones(settings, lock, statement, refused):  # type: ignore[no-untyped-def]
    """Behind PgBouncer the connection's own timeouts (the role's defaults in the database) are checked at start-up
    against DB_LOCK_TIMEOUT_MS / DB_STATEMENT_TIMEOUT_MS: none, or looser ones, refuse to start."""
    settings.PGBOUNCER = True
    settings.DB_LOCK_TIMEOUT_MS = settings.DB_STATEMENT_TIMEOUT_MS = 1000
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{lock}'; SET LOCAL statement_timeout = '{statement}'")
        found = pooled_connection_timeouts()
    assert [(m.id, m.msg.split(" on a pooled")[0]) for m in found] == [(POOLED_TIMEOUTS, r) for r in refused]
    settings.PGBOUNCER = False  # control: connected directly, the startup options bound it and nothing is asked
    assert pooled_connection_timeouts() == []


@pytest.mark.django_db(transaction=True)
def test_a_read_cut_by_a_timeout_outside_any_service_is_503_busy(api) -> None:  # type: ignore[no-untyped-def]
    """A queue poll reads in autocommit, outside the transaction runner: when the database's bound cuts it (here a
    session lock_timeout of 100 ms on the test's connection, which the test client shares), the answer is 503 busy
    with Retry-After, not a 500. The tables are held by another connection for the whole request."""
    locked, release, errors = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("LOCK TABLE queue_passes, product_queues IN ACCESS EXCLUSIVE MODE")
                locked.set()
                assert release.wait(timeout=60)
        except BaseException as exc:
            errors.append(exc)
            locked.set()
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(timeout=30)
        show("lock_timeout")  # opens this thread's connection before the bound is set on it
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '100ms'")
        response = api.get("/v1/products/1/queue")
    finally:
        release.set()
        holder.join(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert errors == []
    assert (response.status_code, response.json()["code"], response["Retry-After"]) == (503, "busy", "1")
    assert api.get("/v1/products/1/queue").status_code == 404  # control: the lock gone, the same poll is answered
