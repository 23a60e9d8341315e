"""The migration guard (devtools.migration_guard): the project's own migrations pass (those applied before the guard,
by an explicit named list), and a migration that would rewrite, long-lock or bulk-write a table that has rows is
refused, one control per rule, beside the safe way to write the same change, which passes. Hand-written SQL is read
by tokens (each spelling the previous regular expressions missed has a control on them), and a migration's Python is
reported, never run while collecting (the control: Django's collecting ``apply`` runs it)."""

import pytest
from django.contrib.postgres.functions import RandomUUID
from django.contrib.postgres.operations import AddConstraintNotValid, AddIndexConcurrently, ValidateConstraint
from django.db import connection, migrations, models
from django.db.migrations.loader import MigrationLoader

from devtools.migration_guard import GRANDFATHERED, check_statements, migration_sql, project_findings
from skincare.data_migrations import RunInBatches, RunOnSmallTable
from skincare.tests import naive_migration_guard

pytestmark = pytest.mark.django_db


def test_the_projects_migrations_pass_the_guard():
    found = project_findings(connection)
    unlisted = {key: [str(f) for f in findings] for key, findings in found.items() if key not in GRANDFATHERED}
    assert unlisted == {}, "a migration would rewrite or long-lock a table during a sale (docs/runbooks/deploys.md)"


def test_the_grandfathered_list_names_only_migrations_that_break_a_rule():
    found = project_findings(connection)
    assert sorted(GRANDFATHERED) == sorted(found), "a grandfathered migration is gone or no longer breaks a rule"


def findings_of(*operations, atomic=True):
    """The guard's findings for a migration of ``operations`` on top of the orders app's latest migration."""
    loader = MigrationLoader(connection)
    [leaf] = loader.graph.leaf_nodes("orders")
    migration = type("Migration", (migrations.Migration,), {"operations": list(operations), "atomic": atomic})(
        "9999_guard_probe", "orders"
    )
    return sorted({f.rule.split(" (")[0] for f in check_statements(migration_sql(connection, loader, leaf, migration))})


BAD = {
    "index without CONCURRENTLY": (
        [migrations.AddIndex("order", models.Index(fields=["created_at"], name="orders_probe_idx"))],
        "index built without CONCURRENTLY",
    ),
    "unique constraint": (
        [migrations.AddConstraint("order", models.UniqueConstraint(fields=["id", "total"], name="orders_probe_uq"))],
        "index built without CONCURRENTLY",
    ),
    "volatile default": (
        [migrations.AddField("order", "probe", models.UUIDField(db_default=RandomUUID()))],
        "column with a volatile default",
    ),
    "type change": (
        [migrations.AlterField("order", "total", models.DecimalField(max_digits=14, decimal_places=2))],
        "type change",
    ),
    "validating check": (
        [migrations.AddConstraint("order", models.CheckConstraint(condition=models.Q(total__lt=10**9), name="p"))],
        "validating constraint",
    ),
    "set not null": (
        [migrations.AlterField("order", "payment_expires_at", models.DateTimeField())],
        "validating constraint",
    ),
    "back-fill": ([migrations.RunSQL("UPDATE orders SET total = total", migrations.RunSQL.noop)], "data change"),
    "vacuum full": ([migrations.RunSQL("VACUUM FULL orders", migrations.RunSQL.noop)], "table rewrite or lock"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_control_a_migration_that_would_lock_or_rewrite_orders_is_refused(case):
    operations, rule = BAD[case]
    assert any(found.startswith(rule) for found in findings_of(*operations)), findings_of(*operations)


def test_the_safe_way_to_write_the_same_changes_passes():
    check = models.CheckConstraint(condition=models.Q(total__lt=10**9), name="orders_probe_total")
    assert findings_of(migrations.AddField("order", "probe", models.TextField(null=True))) == []
    assert findings_of(migrations.AddField("order", "probe", models.IntegerField(default=0))) == []  # constant
    assert findings_of(AddConstraintNotValid("order", check), ValidateConstraint("order", "orders_probe_total")) == []


@pytest.mark.django_db(transaction=True)  # a concurrent index build refuses to run inside the test's transaction
def test_an_index_built_concurrently_passes():
    index = models.Index(fields=["created_at"], name="orders_probe_idx")
    assert findings_of(AddIndexConcurrently("order", index), atomic=False) == []


def test_a_table_created_in_the_same_migration_is_exempt():
    fields = [("id", models.BigAutoField(primary_key=True)), ("n", models.PositiveIntegerField(default=0))]
    created = migrations.CreateModel("Probe", fields, options={"db_table": "orders_probe"})
    index = migrations.AddIndex("probe", models.Index(fields=["n"], name="orders_probe_n_idx"))
    assert findings_of(created, index) == []


# Hand-written SQL (RunSQL) that the previous matcher (skincare/tests/naive_migration_guard.py) let through: each
# is refused now, and the control shows the naive guard finding nothing in the same SQL.
SPELLINGS = {
    "ADD without COLUMN, volatile default": (
        "ALTER TABLE orders ADD probe uuid DEFAULT gen_random_uuid()",
        "column with a volatile default",
    ),
    "VACUUM (FULL)": ("VACUUM (FULL, ANALYZE) orders", "table rewrite or lock"),
    "REINDEX": ("REINDEX TABLE orders", "index built without CONCURRENTLY"),
    "TRUNCATE": ("TRUNCATE TABLE orders CASCADE", "table rewrite or lock"),
    "unnamed ADD UNIQUE": ("ALTER TABLE orders ADD UNIQUE (id, total)", "index built without CONCURRENTLY"),
    "unnamed ADD CHECK": ("ALTER TABLE orders ADD CHECK (total < 1000000000)", "validating constraint"),
    "comment inside CREATE INDEX": (
        "CREATE /* not concurrently */ INDEX orders_probe_idx ON orders (created_at)",
        "index built without CONCURRENTLY",
    ),
    "UPDATE behind a CTE": (
        "WITH stale AS (SELECT id FROM orders WHERE total = 0) UPDATE orders SET total = 1 WHERE id IN "
        "(SELECT id FROM stale)",
        "data change",
    ),
}


def rules_on_orders(findings):
    return sorted({f.rule.split(" (")[0] for f in findings if f.table == "orders"})


@pytest.mark.parametrize("case", sorted(SPELLINGS))
def test_a_hand_written_spelling_that_rewrites_or_locks_orders_is_refused(case):
    sql, rule = SPELLINGS[case]
    assert any(found.startswith(rule) for found in findings_of(migrations.RunSQL(sql, migrations.RunSQL.noop)))


@pytest.mark.parametrize("case", sorted(SPELLINGS))
def test_control_the_naive_matcher_lets_the_same_spelling_through(case):
    sql, rule = SPELLINGS[case]
    assert naive_migration_guard.check_statements([sql]) == []
    assert any(found.startswith(rule) for found in rules_on_orders(check_statements([sql])))


# What the audit found untested: each refused, beside its safe spelling, which passes.
REFUSED_WITH_SAFE_TWIN = {
    "inline CHECK on an added column": (
        "ALTER TABLE orders ADD COLUMN probe integer NULL CHECK (probe >= 0)",
        "ALTER TABLE orders ADD COLUMN probe integer NULL",
        "validating constraint",
    ),
    "inline REFERENCES on an added column": (
        "ALTER TABLE orders ADD COLUMN probe_id bigint NULL REFERENCES auth_user (id)",
        "ALTER TABLE orders ADD COLUMN probe_id bigint NULL",
        "validating constraint",
    ),
    "validating FOREIGN KEY": (
        "ALTER TABLE orders ADD CONSTRAINT orders_probe_fk FOREIGN KEY (customer_id) REFERENCES auth_user (id)",
        "ALTER TABLE orders ADD CONSTRAINT orders_probe_fk FOREIGN KEY (customer_id) REFERENCES auth_user (id) "
        "NOT VALID",
        "validating constraint",
    ),
    "unnamed CHECK": (
        "ALTER TABLE orders ADD CHECK (total >= 0)",
        "ALTER TABLE orders ADD CHECK (total >= 0) NOT VALID",
        "validating constraint",
    ),
    "LOCK TABLE": (
        "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE",
        "CREATE TABLE orders_probe (id integer); LOCK TABLE orders_probe IN ACCESS EXCLUSIVE MODE",
        "table rewrite or lock",
    ),
    "CLUSTER": (
        "CLUSTER orders USING orders_pkey",
        "CREATE TABLE orders_probe (id integer); CLUSTER orders_probe USING orders_probe_pkey",
        "table rewrite or lock",
    ),
    "REINDEX": ("REINDEX INDEX orders_pkey", "REINDEX INDEX CONCURRENTLY orders_pkey", "index built"),
    "REINDEX with an option list": (
        "REINDEX (CONCURRENTLY false, VERBOSE) TABLE orders",
        "REINDEX (VERBOSE, CONCURRENTLY) TABLE orders",
        "index built",
    ),
    "DELETE": (
        "DELETE FROM orders WHERE total = 0",
        "CREATE TABLE orders_probe (id integer); DELETE FROM orders_probe WHERE id = 0",
        "data change",
    ),
    "INSERT ... SELECT into an existing table": (
        "INSERT INTO orders_archive SELECT * FROM orders",
        "INSERT INTO orders_archive (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id",
        "data change",
    ),
    "COPY into an existing table": (
        "COPY orders (id) FROM STDIN",
        "COPY orders (id) TO STDOUT",
        "data change",
    ),
    "a write inside a CTE": (
        "WITH gone AS (DELETE FROM orders WHERE total = 0 RETURNING id) SELECT count(*) FROM gone",
        "WITH kept AS (SELECT id FROM orders FOR UPDATE) SELECT count(*) FROM kept",
        "data change",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_WITH_SAFE_TWIN))
def test_each_rule_refuses_its_statement_and_passes_its_safe_twin(case):
    refused, safe, rule = REFUSED_WITH_SAFE_TWIN[case]
    table = "orders_archive" if "orders_archive" in refused else "orders"
    assert any(f.rule.startswith(rule) and f.table.startswith(table) for f in check_statements([refused])), refused
    assert [f for f in check_statements([safe]) if f.table.startswith("orders")] == [], safe


@pytest.mark.parametrize("sql", ["DO $$ BEGIN UPDATE orders SET total = total; END $$", "CALL restamp_orders()"])
def test_procedural_code_the_guard_cannot_read_is_refused(sql):
    """A DO block's body is a string to the tokenizer (what it writes cannot be seen), as a procedure's is."""
    assert [f.rule.split(" (")[0] for f in check_statements([sql])] == ["code the guard cannot read"]
    assert naive_migration_guard.check_statements([sql]) == []  # control: the previous matcher saw nothing


def test_keywords_in_strings_comments_and_other_clauses_are_not_statements():
    harmless = [
        "COMMENT ON TABLE orders IS 'VACUUM FULL orders; TRUNCATE orders'",
        "-- TRUNCATE orders\nSELECT 1",
        "/* nested /* REINDEX TABLE orders */ LOCK TABLE orders */ SELECT 1",
        "INSERT INTO orders_notes (note) VALUES (E'it''s \\' UPDATE orders SET total = 0')",
        "CREATE FUNCTION f() RETURNS void LANGUAGE sql AS $body$ DELETE FROM orders $body$",
        'ALTER TABLE orders ADD COLUMN "check" text NULL',
        "ALTER TABLE orders ADD COLUMN probe numeric(12, 2) DEFAULT '0'::numeric(12, 2) NULL",
        "ALTER TABLE orders ADD COLUMN probe timestamptz DEFAULT now() NOT NULL",
    ]
    assert {sql: check_statements([sql]) for sql in harmless} == {sql: [] for sql in harmless}


# --- Python: reported, never run -------------------------------------------------------------------------------


@pytest.fixture
def marker_table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE guard_marker (n integer)")
    return "guard_marker"


def marker_rows():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM guard_marker")
        return cursor.fetchone()[0]


CALLED = []


def write_a_marker(apps, schema_editor):
    CALLED.append(True)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("INSERT INTO guard_marker VALUES (1)")


@pytest.mark.parametrize("nested", [False, True], ids=["RunPython", "inside SeparateDatabaseAndState"])
def test_a_data_migration_in_python_is_reported_and_never_run(marker_table, nested):
    CALLED.clear()
    operation = migrations.RunPython(write_a_marker, migrations.RunPython.noop)
    if nested:
        operation = migrations.SeparateDatabaseAndState(database_operations=[operation])
    assert findings_of(operation) == ["data migration in Python"]
    assert (CALLED, marker_rows()) == ([], 0)


def test_control_collecting_as_the_guard_used_to_runs_the_python(marker_table):
    """The previous collection (Django's ``Migration.apply`` on a collecting schema editor) called the code."""
    CALLED.clear()
    loader = MigrationLoader(connection)
    [leaf] = loader.graph.leaf_nodes("orders")
    migration = type("Migration", (migrations.Migration,), {"operations": [migrations.RunPython(write_a_marker)]})(
        "9999_guard_probe", "orders"
    )
    with connection.schema_editor(collect_sql=True) as editor:
        migration.apply(loader.project_state(leaf, at_end=True), editor)
    assert (CALLED, marker_rows()) == ([True], 1)


class WritesWhileCollected(migrations.RunSQL):
    """A third-party operation that claims to be SQL and writes through the connection itself."""

    def __init__(self):
        super().__init__("SELECT 1", migrations.RunSQL.noop)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("INSERT INTO guard_marker VALUES (1)")


def test_a_write_while_collecting_is_refused_and_leaves_nothing(marker_table):
    with pytest.raises(RuntimeError, match="executes nothing while collecting"):
        findings_of(WritesWhileCollected())
    assert marker_rows() == 0


def test_the_two_safe_data_migration_shapes_pass_and_a_data_change_in_sql_does_not():
    assert findings_of(RunInBatches("orders", write_a_marker), atomic=False) == []
    assert findings_of(RunOnSmallTable("orders", write_a_marker, max_rows=100)) == []
    assert findings_of(migrations.RunSQL("DELETE FROM orders WHERE total = 0", migrations.RunSQL.noop)) == [
        "data change of an existing table in a migration"
    ]
