"""Behind PgBouncer every retry_transient service transaction sets its own lock/statement timeouts with SET LOCAL
(one statement, sent before its first one), so the bounds hold behind a transaction-mode pooler and end with the
transaction. Connected directly, the connection's startup options carry the bounds and nothing is added."""

import pytest
from django.db import connection, transaction

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
