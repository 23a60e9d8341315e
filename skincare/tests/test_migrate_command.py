"""``manage.py migrate`` during a sale (skincare/management/commands/migrate.py): a schema change that cannot get its
lock within MIGRATION_LOCK_TIMEOUT_MS gives up instead of queueing every later checkout behind it, and is tried again
once the lock is free; with one attempt (the control) the refusal is the result. Synchronised by events and the
database's lock waits, never by sleeping."""

import threading

import psycopg.errors
import pytest
from django.core.management import CommandError, call_command, get_commands
from django.db import OperationalError, connection, transaction

from devtools.testing import ThreadRun
from skincare.management.commands.migrate import migration_timeouts, run_with_lock_retries

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def probe_table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE migrate_probe (id integer)")
    yield "migrate_probe"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS migrate_probe")


def add_column():
    with migration_timeouts("default"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        in_force = cursor.fetchone()[0]
        cursor.execute("ALTER TABLE migrate_probe ADD COLUMN note text NULL")
        return in_force


def hold_the_table(held, release):
    """A checkout's transaction, still open: it holds a lock on the table the migration alters."""

    def hold():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("LOCK TABLE migrate_probe IN ROW EXCLUSIVE MODE")
            held.set()
            assert release.wait(timeout=60)

    return ThreadRun(hold, name="checkout")


def columns():
    with connection.cursor() as cursor:
        cursor.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'migrate_probe'")
        return sorted(row[0] for row in cursor.fetchall())


def test_a_refused_lock_is_retried_once_the_table_is_free(probe_table, settings):
    settings.MIGRATION_LOCK_TIMEOUT_MS = 100
    held, release = threading.Event(), threading.Event()
    refused = []

    def retrying(attempt, error):
        refused.append((attempt, type(error.__cause__)))
        release.set()  # the checkout commits; the next attempt finds the table free

    holder = hold_the_table(held, release)
    try:
        assert held.wait(timeout=60)
        in_force = run_with_lock_retries(add_column, attempts=3, pause_seconds=0, on_retry=retrying)
    finally:
        release.set()
        assert holder.join().error is None
    assert in_force == "100ms"
    assert refused == [(1, psycopg.errors.LockNotAvailable)]
    assert columns() == ["id", "note"]


def test_control_one_attempt_behind_a_held_lock_is_refused_and_changes_nothing(probe_table, settings):
    settings.MIGRATION_LOCK_TIMEOUT_MS = 100
    held, release = threading.Event(), threading.Event()
    holder = hold_the_table(held, release)
    try:
        assert held.wait(timeout=60)
        with pytest.raises(OperationalError) as refused:
            run_with_lock_retries(add_column, attempts=1, pause_seconds=0, on_retry=lambda *a: None)
    finally:
        release.set()
        assert holder.join().error is None
    assert isinstance(refused.value.__cause__, psycopg.errors.LockNotAvailable)
    assert columns() == ["id"]


def test_the_bounds_end_with_the_migration(settings):
    settings.MIGRATION_LOCK_TIMEOUT_MS = 100
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        request_bound = cursor.fetchone()[0]
        with migration_timeouts("default"):
            cursor.execute("SHOW lock_timeout")
            assert cursor.fetchone()[0] == "100ms"
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == request_bound != "100ms"


def test_migrate_is_the_bounded_command_and_refuses_pgbouncer(settings):
    assert get_commands()["migrate"] == "skincare"
    settings.PGBOUNCER = True
    with pytest.raises(CommandError, match="directly, not through PgBouncer"):
        call_command("migrate", "--check", verbosity=0)


ROLE_SETTINGS_SQL = """
    SELECT setconfig FROM pg_db_role_setting
     WHERE setrole = (SELECT oid FROM pg_roles WHERE rolname = current_user)
       AND setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def test_migrate_sets_the_roles_timeouts_in_the_database_from_the_settings(settings):
    """What bounds every statement behind PgBouncer (docs/operations.md, timeouts behind a pooler)."""
    original = settings.DB_LOCK_TIMEOUT_MS, settings.DB_STATEMENT_TIMEOUT_MS
    settings.DB_LOCK_TIMEOUT_MS, settings.DB_STATEMENT_TIMEOUT_MS = 1234, 5678
    try:
        call_command("migrate", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute(ROLE_SETTINGS_SQL)
            [config] = cursor.fetchone()
    finally:
        settings.DB_LOCK_TIMEOUT_MS, settings.DB_STATEMENT_TIMEOUT_MS = original
        call_command("migrate", verbosity=0)
    assert sorted(config) == ["lock_timeout=1234ms", "statement_timeout=5678ms"]


def bounds_in_force():
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
        return cursor.fetchone()


def test_a_connection_opened_during_the_migration_gets_its_bounds(settings):
    """``manage.py migrate`` starts with no connection open: the one Django opens for it is bounded too."""
    settings.MIGRATION_LOCK_TIMEOUT_MS, settings.MIGRATION_STATEMENT_TIMEOUT_MS = 100, 60000
    connection.close()
    with migration_timeouts("default"):
        assert connection.connection is None
        assert bounds_in_force() == ("100ms", "1min")
    connection.close()
    assert bounds_in_force() != ("100ms", "1min")  # control: a connection opened after it has the request bounds


def test_a_statement_longer_than_the_migration_statement_timeout_is_cancelled(settings):
    settings.MIGRATION_STATEMENT_TIMEOUT_MS = 100
    with migration_timeouts("default"), connection.cursor() as cursor, pytest.raises(OperationalError) as cancelled:
        cursor.execute("SELECT pg_sleep(0.5)")
    assert isinstance(cancelled.value.__cause__, psycopg.errors.QueryCanceled)


def test_control_without_a_migration_statement_timeout_the_same_statement_runs(settings):
    settings.MIGRATION_STATEMENT_TIMEOUT_MS = 0
    with migration_timeouts("default"), connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.5), current_setting('statement_timeout')")
        assert cursor.fetchone()[1] == "0"


def test_the_migrate_command_bounds_the_connection_it_opens_itself(settings):
    """End to end: ``manage.py migrate`` from a process with no connection open yet. Every statement it sends about
    the migrations (the recorder's table) runs under MIGRATION_LOCK_TIMEOUT_MS, read from the server as it runs."""
    settings.MIGRATION_LOCK_TIMEOUT_MS = 123
    seen = []

    def spy(execute, sql, params, many, context):
        if "django_migrations" in sql:
            with context["connection"].connection.cursor() as raw:  # psycopg's own cursor: not wrapped again
                raw.execute("SELECT current_setting('lock_timeout')")
                seen.append(raw.fetchone()[0])
        return execute(sql, params, many, context)

    connection.close()
    with connection.execute_wrapper(spy):
        call_command("migrate", verbosity=0)
    assert seen and set(seen) == {"123ms"}, seen
