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
        ('payments', '0003_payment_currency'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='paymentattempt',
                    name='order',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='payment_attempts', to='orders.order'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS payment_attempts_order_id_60debcd5",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_order_id_60debcd5 ON payment_attempts (order_id)",
                ),
            ],
        ),
    ]
