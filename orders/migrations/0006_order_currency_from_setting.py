"""The orders that 0004_order_currency stamped ``IDR`` carry the shop's currency (``SHOP_CURRENCY``) instead.

0004 added the column with the database default ``IDR``, so every order that existed before it was stamped IDR
whatever ``SHOP_CURRENCY`` said; a payment event in the shop's real currency was then a ``currency_mismatch``.
Exactly those orders are re-stamped: ``currency = 'IDR'`` and created before 0004 was recorded as applied
(``django_migrations.applied``). An order written after that was written by checkout in the setting of its day and
is left alone, as is every order when ``SHOP_CURRENCY`` is IDR (nothing to do). Forward only: the reverse cannot
tell which orders were stamped.

Batches of ``BATCH`` rows, each its own short transaction (``atomic = False``): no long row locks on orders while
the shop sells (docs/runbooks/deploys.md#write-a-data-migration). Run the migration with the ``SHOP_CURRENCY`` the shop sold in before 0004.
"""

from django.conf import settings
from django.db import migrations

BATCH = 1000
# One batch: the lowest-numbered stamped orders created before 0004 was applied; the ids written, to go on from.
RESTAMP_SQL = """
    UPDATE orders SET currency = %(currency)s
     WHERE id IN (SELECT id FROM orders
                   WHERE currency = 'IDR' AND id > %(after)s
                     AND created_at < (SELECT applied FROM django_migrations
                                        WHERE app = 'orders' AND name = '0004_order_currency')
                   ORDER BY id LIMIT %(batch)s)
    RETURNING id
"""


def restamp_orders(apps, schema_editor):
    currency = settings.SHOP_CURRENCY
    if currency == "IDR":
        return
    connection, after = schema_editor.connection, 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(RESTAMP_SQL, {"currency": currency, "after": after, "batch": BATCH})
            ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return
        after = max(ids)


class Migration(migrations.Migration):
    atomic = False  # one short transaction per batch (autocommit), not one lock on every stamped order

    dependencies = [
        ("orders", "0005_drop_redundant_fk_indexes"),
    ]

    operations = [migrations.RunPython(restamp_orders, migrations.RunPython.noop, elidable=True)]
