"""The migration guard: refuses a migration whose SQL would rewrite or long-lock a table that already has rows.

A migration runs while the shop sells (docs/operations.md, "Apply a migration during a sale"). Every statement on a
table that existed before the migration must take its lock only for a moment; what takes an ``ACCESS EXCLUSIVE`` (or
``SHARE``) lock for as long as the table is long stops every checkout that touches the table for that long:

- ``CREATE INDEX`` without ``CONCURRENTLY`` (and ``ADD CONSTRAINT ... UNIQUE / PRIMARY KEY`` without ``USING INDEX``:
  the same index build under the table lock);
- ``ADD COLUMN`` with a volatile default, a stored generated column or an identity/serial (every row rewritten);
- ``ALTER COLUMN ... TYPE`` (a rewrite, or at least a scan, under ``ACCESS EXCLUSIVE``);
- a validating constraint: ``ADD CONSTRAINT ... CHECK / FOREIGN KEY`` without ``NOT VALID`` (add it ``NOT VALID``,
  then ``VALIDATE CONSTRAINT`` in its own statement), ``SET NOT NULL``, an inline ``CHECK`` / ``REFERENCES`` on an
  added column;
- whole-table rewrites and bulk writes: ``VACUUM FULL``, ``CLUSTER``, ``SET TABLESPACE``, ``LOCK TABLE``, an
  ``UPDATE`` / ``DELETE`` of an existing table.

Tables created earlier in the same migration are empty: anything goes on them. The SQL is the one Django would send
(``sqlmigrate``'s, RunSQL included), collected without executing: :func:`migration_sql`. Migrations applied before
the guard existed and that break a rule are listed by name in ``GRANDFATHERED``, each with why it was acceptable
then; ``skincare/tests/test_migration_guard.py`` fails for any other, and for a listed one that no longer breaks a
rule (the list only shrinks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The project's own apps (the guard's scope; Django's and third-party apps' migrations are not ours to change).
PROJECT_APPS = ("skincare", "inventory", "orders", "payments", "carts", "waitingroom", "backoffice")

# Applied before the guard, each breaking a rule on a table that existed then (all ran before the first sale, on
# small tables). A new migration is never added here: it is written the safe way.
GRANDFATHERED: dict[tuple[str, str], str] = {
    ("inventory", "0003_product_inventory_strategy"): "validating CHECK on products (catalogue table, before sales)",
    ("inventory", "0004_product_max_per_customer"): "inline CHECK and validating CHECK on products",
    ("inventory", "0005_product_sale_window"): "validating CHECKs on products",
    ("inventory", "0006_stock_buckets"): "stock rows split into stock_buckets: CHECKs on products and stock_movements",
    ("inventory", "0007_stock_buckets_fillfactor"): "VACUUM FULL stock_buckets (a few hundred rows then)",
    ("orders", "0002_orders_customer_pending_idx"): "index on orders built without CONCURRENTLY",
    ("orders", "0003_reservation_bucket"): "reservations' bucket back-filled and SET NOT NULL",
    ("orders", "0004_order_currency"): "validating CHECK on orders",
    ("payments", "0002_idempotency_keys"): "index on processed_events built without CONCURRENTLY",
    ("payments", "0003_payment_currency"): "index and validating CHECK on payment_attempts",
}

# Functions a column default may call without making it volatile (PostgreSQL evaluates them once per statement).
STABLE_DEFAULT_FUNCTIONS = frozenset({"now", "statement_timestamp", "transaction_timestamp", "current_timestamp"})

_DOLLAR_QUOTED = re.compile(r"\$([A-Za-z_]*)\$.*?\$\1\$", re.S)
_QUOTED_NAME = r'"?([A-Za-z_][A-Za-z0-9_.]*)"?'
_CREATE_TABLE = re.compile(r"^CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?" + _QUOTED_NAME, re.I)
_CREATE_INDEX = re.compile(
    r"^CREATE\s+(UNIQUE\s+)?INDEX\s+(CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?:\S+\s+)?ON\s+(?:ONLY\s+)?"
    + _QUOTED_NAME,
    re.I,
)
_ALTER_TABLE = re.compile(r"^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?" + _QUOTED_NAME + r"\s+(.*)$", re.I | re.S)
_WRITE = re.compile(r"^(UPDATE|DELETE\s+FROM)\s+(?:ONLY\s+)?" + _QUOTED_NAME, re.I)
_REWRITE = re.compile(r"^(VACUUM\s+FULL|CLUSTER|LOCK\s+TABLE|LOCK)\s+(?:\([^)]*\)\s+)?" + _QUOTED_NAME, re.I)
_FUNCTION_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\(")


@dataclass(frozen=True)
class Finding:
    """One statement that would rewrite or long-lock ``table``, and which rule it breaks."""

    table: str
    rule: str
    statement: str

    def __str__(self) -> str:
        return f"{self.rule} on {self.table}: {self.statement[:200]}"


def statements(sql_chunks: list[str]) -> list[str]:
    """The single statements in Django's collected SQL or ``sqlmigrate``'s output (a chunk may hold several;
    comments, BEGIN/COMMIT and function bodies are left out)."""
    found: list[str] = []
    for chunk in sql_chunks:
        code = "\n".join(line for line in chunk.splitlines() if not line.lstrip().startswith("--"))
        for statement in _DOLLAR_QUOTED.sub("$$ $$", code).split(";"):
            text = " ".join(statement.split())
            if text and text.upper() not in ("BEGIN", "COMMIT"):
                found.append(text)
    return found


def _default_is_volatile(clause: str) -> bool:
    match = re.search(
        r"\bDEFAULT\b(.*?)(?:\bNOT\s+NULL\b|\bNULL\b|\bCONSTRAINT\b|\bCHECK\b|\bREFERENCES\b|$)", clause, re.I
    )
    if not match:
        return False
    called = {name.lower().rsplit(".", 1)[-1] for name in _FUNCTION_CALL.findall(match.group(1))}
    return bool(called - STABLE_DEFAULT_FUNCTIONS)


def _alter_findings(table: str, action: str) -> list[str]:
    """The rules one ``ALTER TABLE <table> <action>`` breaks (``action`` may hold several comma-separated ones)."""
    rules: list[str] = []
    upper = action.upper()
    if re.search(r"\bALTER\s+(COLUMN\s+)?\S+\s+(SET\s+DATA\s+)?TYPE\b", upper):
        rules.append("type change")
    if re.search(r"\bSET\s+NOT\s+NULL\b", upper):
        rules.append("validating constraint (SET NOT NULL scans the table under ACCESS EXCLUSIVE)")
    if re.search(r"\bSET\s+TABLESPACE\b", upper):
        rules.append("table rewrite (SET TABLESPACE)")
    for column in re.findall(r"\bADD\s+(?:COLUMN\s+)(.*?)(?=,\s*ADD\b|$)", action, re.I | re.S):
        col = column.upper()
        if re.search(r"\bGENERATED\b.*\bSTORED\b|\bGENERATED\b.*\bAS\s+IDENTITY\b|\b(BIG|SMALL)?SERIAL\b", col):
            rules.append("column with a volatile default (generated, identity or serial: every row rewritten)")
        elif _default_is_volatile(column):
            rules.append("column with a volatile default (every row rewritten)")
        if re.search(r"\bCHECK\b|\bREFERENCES\b", col):
            rules.append("validating constraint (inline CHECK / REFERENCES on an added column)")
    for constraint in re.findall(r"\bADD\s+CONSTRAINT\s+\S+\s+(.*?)(?=,\s*ADD\b|$)", action, re.I | re.S):
        con = constraint.upper()
        if re.match(r"(CHECK|FOREIGN\s+KEY)\b", con) and not re.search(r"\bNOT\s+VALID\b", con):
            rules.append("validating constraint (add it NOT VALID, then VALIDATE CONSTRAINT)")
        elif re.match(r"(UNIQUE|PRIMARY\s+KEY|EXCLUDE)\b", con) and "USING INDEX" not in con:
            rules.append("index built without CONCURRENTLY (a UNIQUE / PRIMARY KEY constraint builds its index)")
    return rules


def check_statements(sql: list[str]) -> list[Finding]:
    """Every statement of one migration that would rewrite or long-lock a table that existed before it."""
    created: set[str] = set()
    findings: list[Finding] = []

    def existing(name: str) -> bool:
        return name.lower() not in created

    for statement in statements(sql):
        if match := _CREATE_TABLE.match(statement):
            created.add(match.group(1).lower())
        elif match := _CREATE_INDEX.match(statement):
            if not match.group(2) and existing(match.group(3)):
                findings.append(Finding(match.group(3), "index built without CONCURRENTLY", statement))
        elif match := _ALTER_TABLE.match(statement):
            if existing(match.group(1)):
                findings += [Finding(match.group(1), rule, statement) for rule in _alter_findings(*match.groups())]
        elif match := _WRITE.match(statement):
            if existing(match.group(2)):
                findings.append(Finding(match.group(2), "bulk write of an existing table in a migration", statement))
        elif (match := _REWRITE.match(statement)) and existing(match.group(2)):
            findings.append(Finding(match.group(2), f"table rewrite or lock ({match.group(1).upper()})", statement))
    return findings


def migration_sql(connection: Any, loader: Any, key: tuple[str, str], migration: Any = None) -> list[str]:
    """The SQL Django would send for migration ``key`` (or for ``migration``, a Migration not on disk, applied on
    top of ``key``), collected without executing anything."""
    if migration is None:
        migration, state = loader.disk_migrations[key], loader.project_state(key, at_end=False)
    else:
        state = loader.project_state(key, at_end=True)
    with connection.schema_editor(collect_sql=True, atomic=migration.atomic) as editor:
        migration.apply(state, editor)
    return list(editor.collected_sql)


def project_findings(connection: Any) -> dict[tuple[str, str], list[Finding]]:
    """Every project migration on disk with what it breaks (those that break nothing are left out)."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(connection)
    found: dict[tuple[str, str], list[Finding]] = {}
    for key in sorted(loader.disk_migrations):
        if key[0] in PROJECT_APPS and (findings := check_statements(migration_sql(connection, loader, key))):
            found[key] = findings
    return found
