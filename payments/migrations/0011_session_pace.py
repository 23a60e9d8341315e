"""The gateway's payment-page pace, shared by every web process (PAYMENT_SESSIONS_PER_SECOND)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('payments', '0010_idempotency_key_moves_to_checkout'),
    ]

    operations = [
        migrations.CreateModel(
            name='SessionPace',
            fields=[
                ('gateway', models.CharField(max_length=20, primary_key=True, serialize=False)),
                ('next_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'payment_session_pace',
            },
        ),
    ]
