"""The stock rows' table is set so that a checkout's UPDATE can stay HOT (migration 0007): room left on every page
(fillfactor), and no index on a column the checkout changes."""

import importlib

import pytest
from django.db import connection

from inventory.reserve import CLAIM_BUCKET_SQL, RESERVE_SQL

# What the checkout's reservation writes (RESERVE_SQL, CLAIM_BUCKET_SQL): an index on any of them makes every such
# UPDATE a non-HOT one, with a new entry in every index of the table.
COUNTERS = {"available_stock", "reserved_stock", "version", "updated_at"}

INDEXED_COLUMNS_SQL = """
SELECT i.relname, a.attname
  FROM pg_index x
  JOIN pg_class i ON i.oid = x.indexrelid
  JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey)
 WHERE x.indrelid = 'stock_buckets'::regclass
UNION
SELECT i.relname, a.attname  -- columns an expression or a partial index's predicate reads
  FROM pg_index x
  JOIN pg_class i ON i.oid = x.indexrelid
  JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum > 0
 WHERE x.indrelid = 'stock_buckets'::regclass
   AND (pg_get_expr(x.indexprs, x.indrelid) ~ ('\\m' || a.attname || '\\M')
        OR pg_get_expr(x.indpred, x.indrelid) ~ ('\\m' || a.attname || '\\M'))
"""


def _indexed() -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(INDEXED_COLUMNS_SQL)
        return set(cursor.fetchall())


@pytest.mark.django_db
def test_no_index_of_the_stock_rows_covers_a_counter() -> None:
    indexed = _indexed()
    assert {column for _, column in indexed} >= {"product_id", "bucket"}  # the lookups the checkout needs
    assert [(index, column) for index, column in indexed if column in COUNTERS] == []
    for counter in COUNTERS:  # the statements do write them: the check above is about the right columns
        assert counter in RESERVE_SQL and counter in CLAIM_BUCKET_SQL


@pytest.mark.django_db
def test_the_control_an_index_on_a_counter_is_found() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX stock_buckets_bad_idx ON stock_buckets ((available_stock > 0))")
    assert ("stock_buckets_bad_idx", "available_stock") in _indexed()


@pytest.mark.django_db
def test_stock_row_pages_keep_room_for_new_versions() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'stock_buckets'::regclass")
        (options,) = cursor.fetchone()
    fillfactor = importlib.import_module("inventory.migrations.0007_stock_buckets_fillfactor").FILLFACTOR
    assert fillfactor < 100
    assert f"fillfactor={fillfactor}" in (options or [])


# The tables a checkout writes a row of (or updates, stock_buckets): every index on them is written per checkout.
CHECKOUT_TABLES = [
    "orders",
    "order_lines",
    "inventory_reservations",
    "stock_movements",
    "payment_attempts",
    "stock_buckets",
]

# Pairs (a, b) of plain indexes of one table where a's columns are the leading columns of b's (or the same): a is
# one more write per checkout that no lookup needs, since b serves a's lookups and a foreign key's checks.
REDUNDANT_SQL = """
SELECT t.relname, a.indexrelid::regclass::text, b.indexrelid::regclass::text
  FROM pg_index a
  JOIN pg_index b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
  JOIN pg_class t ON t.oid = a.indrelid
 WHERE t.relname = ANY(%s)
   AND NOT a.indisunique
   AND a.indpred IS NULL AND b.indpred IS NULL AND a.indexprs IS NULL AND b.indexprs IS NULL
   AND (b.indkey::text = a.indkey::text OR b.indkey::text LIKE a.indkey::text || ' %%')
"""


def _redundant() -> list[tuple[str, str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(REDUNDANT_SQL, [CHECKOUT_TABLES])
        return sorted(cursor.fetchall())


@pytest.mark.django_db
def test_no_index_a_checkout_writes_is_covered_by_another() -> None:
    assert _redundant() == []


@pytest.mark.django_db
def test_the_control_a_foreign_key_index_beside_a_composite_one_is_found() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX order_lines_order_only_idx ON order_lines (order_id)")
    assert ("order_lines", "order_lines_order_only_idx", "order_lines_order_product_uniq") in _redundant()
