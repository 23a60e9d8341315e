"""Every gateway transaction id the shop issued, where notifications are matched (``gateway_transactions``), and the
money that arrives for an id it did not issue (``unmatched_payments``). The ids of the sessions already stored are
copied into the new table (a read of payment_sessions, a write of the new table only)."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('orders', '0006_order_currency_from_setting'),
        ('payments', '0006_payment_session_gateway_order_id'),
    ]

    operations = [
        migrations.CreateModel(
            name='GatewayTransaction',
            fields=[
                ('gateway_order_id', models.CharField(max_length=50, primary_key=True, serialize=False)),
                ('gateway', models.CharField(max_length=20)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('order', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='orders.order')),
            ],
            options={
                'db_table': 'gateway_transactions',
                'ordering': ['-created_at'],
            },
        ),
        migrations.CreateModel(
            name='UnmatchedPayment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('gateway', models.CharField(max_length=20)),
                ('gateway_order_id', models.CharField(max_length=50)),
                ('transaction_id', models.CharField(blank=True, db_default='', max_length=200)),
                ('gateway_status', models.CharField(max_length=40)),
                ('amount', models.DecimalField(decimal_places=2, max_digits=12)),
                ('currency', models.CharField(blank=True, db_default='', max_length=3)),
                ('event_id', models.TextField(unique=True)),
                ('received_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('resolved_at', models.DateTimeField(blank=True, null=True)),
                ('resolved_by', models.CharField(blank=True, db_default='', max_length=150)),
            ],
            options={
                'db_table': 'unmatched_payments',
                'ordering': ['-received_at'],
                'indexes': [models.Index(condition=models.Q(('resolved_at', None)), fields=['received_at'], name='unmatched_payments_open_idx')],
            },
        ),
        migrations.RunSQL(
            """
            INSERT INTO gateway_transactions (gateway_order_id, order_id, gateway, created_at)
            SELECT COALESCE(NULLIF(gateway_order_id, ''), order_id::text), order_id, gateway, created_at
              FROM payment_sessions
            """,
            migrations.RunSQL.noop,
        ),
    ]
