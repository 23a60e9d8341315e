"""The two data-migration shapes the migration guard lets through (skincare.data_migrations), applied for real:
``RunInBatches`` commits each batch in a transaction of its own and refuses to run inside one transaction for all
(the control: the same loop as a plain RunPython in an atomic migration is one transaction), and ``RunOnSmallTable``
refuses, before its code runs, a table with more rows than it states (the control: a plain RunPython runs)."""

import pytest
from django.db import connection, migrations
from django.db.migrations.loader import MigrationLoader

from skincare.data_migrations import DataMigrationRefused, RunInBatches, RunOnSmallTable

ROWS = 25


@pytest.fixture
def probe_table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE data_migration_probe (id integer PRIMARY KEY, n integer NOT NULL DEFAULT 0)")
        cursor.execute("INSERT INTO data_migration_probe (id) SELECT generate_series(1, %s)", [ROWS])
    yield "data_migration_probe"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS data_migration_probe")


TRANSACTIONS: list[int] = []

MARK_SQL = """
    UPDATE data_migration_probe SET n = 1
     WHERE id IN (SELECT id FROM data_migration_probe WHERE id > %s ORDER BY id LIMIT %s)
    RETURNING id, txid_current()
"""


def mark_a_batch(apps, schema_editor, after, limit):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(MARK_SQL, [after or 0, limit])
        rows = cursor.fetchall()
    if not rows:
        return None
    TRANSACTIONS.append(rows[0][1])
    return max(row[0] for row in rows)


def apply(operation, *, atomic):
    state = MigrationLoader(connection).project_state()
    with connection.schema_editor(atomic=atomic) as editor:
        operation.database_forwards("orders", editor, state, state)


def marked():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM data_migration_probe WHERE n = 1")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)  # each batch commits: no test transaction around them
def test_run_in_batches_commits_each_batch_in_its_own_transaction(probe_table):
    TRANSACTIONS.clear()
    apply(RunInBatches(probe_table, mark_a_batch, batch_size=10), atomic=False)
    assert marked() == ROWS
    assert len(TRANSACTIONS) == len(set(TRANSACTIONS)) == 3  # 10 + 10 + 5 rows


@pytest.mark.django_db(transaction=True)
def test_control_the_same_loop_in_a_plain_atomic_run_python_is_one_transaction(probe_table):
    TRANSACTIONS.clear()

    def all_batches(apps, schema_editor):
        after = None
        while (after := mark_a_batch(apps, schema_editor, after, 10)) is not None:
            pass

    apply(migrations.RunPython(all_batches), atomic=True)
    assert marked() == ROWS
    assert len(set(TRANSACTIONS)) == 1 != len(TRANSACTIONS)


@pytest.mark.django_db(transaction=True)
def test_run_in_batches_refuses_an_atomic_migration_and_changes_nothing(probe_table):
    TRANSACTIONS.clear()
    with pytest.raises(DataMigrationRefused, match="atomic = False"):
        apply(RunInBatches(probe_table, mark_a_batch, batch_size=10), atomic=True)
    assert (marked(), TRANSACTIONS) == (0, [])


CALLED: list[bool] = []


def mark_all(apps, schema_editor):
    CALLED.append(True)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("UPDATE data_migration_probe SET n = 1")


@pytest.mark.django_db
def test_run_on_small_table_refuses_a_table_above_its_stated_size_before_running(probe_table):
    CALLED.clear()
    with pytest.raises(DataMigrationRefused, match=f"more than {ROWS - 1} rows"):
        apply(RunOnSmallTable(probe_table, mark_all, max_rows=ROWS - 1), atomic=True)
    assert (CALLED, marked()) == ([], 0)
    apply(RunOnSmallTable(probe_table, mark_all, max_rows=ROWS), atomic=True)  # at the bound: it runs
    assert (CALLED, marked()) == ([True], ROWS)


@pytest.mark.django_db
def test_control_a_plain_run_python_changes_a_table_of_any_size(probe_table):
    CALLED.clear()
    apply(migrations.RunPython(mark_all), atomic=True)
    assert (CALLED, marked()) == ([True], ROWS)
