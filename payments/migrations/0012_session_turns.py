"""A payment-page turn booked for an order whose visit came while others were ahead (PAYMENT_SESSIONS_PER_SECOND)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('orders', '0006_order_currency_from_setting'),
        ('payments', '0011_session_pace'),
    ]

    operations = [
        migrations.CreateModel(
            name='SessionTurn',
            fields=[
                ('order', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='+', serialize=False, to='orders.order')),
                ('turn_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'payment_session_turns',
            },
        ),
    ]
