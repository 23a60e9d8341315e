"""Room on every page of the stock rows' table for their next versions (issue 26).

A checkout's UPDATE of a stock row is HOT (heap-only: no index entry written, the old version pruned on the page
by the next reader) only when no indexed column changes and the new version fits on the same page. The counters
the checkout changes (available_stock, reserved_stock, version, updated_at) are in no index
(inventory/tests/test_stock_rows_hot.py keeps it so); with the default fillfactor (100) a page is packed full of
rows and a hot row's new version soon has to go to another page, with an entry in each of the table's three
indexes. FILLFACTOR leaves that share of each page free; VACUUM FULL rewrites the existing rows with it (an ACCESS
EXCLUSIVE lock for the time of the rewrite: the table holds one row per product and bucket, a few milliseconds per
thousand products, but not during a sale).
"""

from django.db import migrations

FILLFACTOR = 50


class Migration(migrations.Migration):
    atomic = False  # VACUUM cannot run inside a transaction block

    dependencies = [("inventory", "0006_stock_buckets")]

    operations = [
        migrations.RunSQL(
            [f"ALTER TABLE stock_buckets SET (fillfactor = {FILLFACTOR})", "VACUUM FULL stock_buckets"],
            ["ALTER TABLE stock_buckets RESET (fillfactor)", "VACUUM FULL stock_buckets"],
        ),
    ]
