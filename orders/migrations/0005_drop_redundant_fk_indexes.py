"""Drop the foreign-key indexes that another index of the same table already leads with: every
checkout inserts a row into each of these tables, and each index is one more write (and WAL record) per checkout;
the lookups and the foreign keys' checks use the composite index instead.

The model state says ``db_index=False``; the database only drops the index (``CONCURRENTLY``: no lock that blocks
checkouts), without re-creating the foreign key as Django's AlterField would (which re-validates every row).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ('orders', '0004_order_currency'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='order',
                    name='customer',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='orders', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='orderline',
                    name='order',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='lines', to='orders.order'),
                ),
                migrations.AlterField(
                    model_name='reservation',
                    name='order',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='reservations', to='orders.order'),
                ),
                migrations.AlterField(
                    model_name='reservation',
                    name='product',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='reservations', to='inventory.product'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS orders_customer_id_b7016332",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_customer_id_b7016332 ON orders (customer_id)",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS order_lines_order_id_5e8377ca",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS order_lines_order_id_5e8377ca ON order_lines (order_id)",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS inventory_reservations_order_id_ef4f42a9",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS inventory_reservations_order_id_ef4f42a9 ON inventory_reservations (order_id)",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS inventory_reservations_product_id_a0e8636d",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS inventory_reservations_product_id_a0e8636d ON inventory_reservations (product_id)",
                ),
            ],
        ),
    ]
