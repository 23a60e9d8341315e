"""A sweeper's lease on a due order's gateway questions: two sweepers never ask about, or cancel, the same order."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('payments', '0008_gateway_transaction_closed_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='paymentsession',
            name='sweep_lease_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='paymentsession',
            name='sweep_lease_by',
            field=models.CharField(blank=True, db_default='', max_length=32),
        ),
    ]
