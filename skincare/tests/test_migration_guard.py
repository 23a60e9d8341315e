"""The migration guard (devtools.migration_guard): the project's own migrations pass (those applied before the guard,
by an explicit named list), and a migration that would rewrite or long-lock a table that has rows is refused, one
control per rule, beside the safe way to write the same change, which passes."""

import pytest
from django.contrib.postgres.functions import RandomUUID
from django.contrib.postgres.operations import AddConstraintNotValid, AddIndexConcurrently, ValidateConstraint
from django.db import connection, migrations, models
from django.db.migrations.loader import MigrationLoader

from devtools.migration_guard import GRANDFATHERED, check_statements, migration_sql, project_findings

pytestmark = pytest.mark.django_db


def test_the_projects_migrations_pass_the_guard():
    found = project_findings(connection)
    unlisted = {key: [str(f) for f in findings] for key, findings in found.items() if key not in GRANDFATHERED}
    assert unlisted == {}, "a migration would rewrite or long-lock a table during a sale (docs/operations.md)"


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
    "back-fill": ([migrations.RunSQL("UPDATE orders SET total = total", migrations.RunSQL.noop)], "bulk write"),
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
