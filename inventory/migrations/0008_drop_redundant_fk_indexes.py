"""Drop the foreign-key indexes that another index of the same table already leads with: every
checkout inserts a row into each of these tables, and each index is one more write (and WAL record) per checkout;
the lookups and the foreign keys' checks use the composite index instead.

The model state says ``db_index=False``; the database only drops the index (``CONCURRENTLY``: no lock that blocks
checkouts), without re-creating the foreign key as Django's AlterField would (which re-validates every row).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ('inventory', '0007_stock_buckets_fillfactor'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='stockbucket',
                    name='product',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='buckets', to='inventory.product'),
                ),
                migrations.AlterField(
                    model_name='stockmovement',
                    name='product',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='stock_movements', to='inventory.product'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS stock_buckets_product_id_a67eb40e",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS stock_buckets_product_id_a67eb40e ON stock_buckets (product_id)",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS stock_movements_product_id_5bacd6d9",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS stock_movements_product_id_5bacd6d9 ON stock_movements (product_id)",
                ),
            ],
        ),
    ]
