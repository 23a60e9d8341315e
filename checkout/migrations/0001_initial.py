"""The checkout's table, ``idempotency_keys``, comes here from payments as it is: only Django's model state moves
(payments' migration 0010 forgets it there); the table, its constraint and its index stay untouched."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("payments", "0009_payment_session_sweep_lease"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="IdempotencyKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
                        ),
                        ("key", models.CharField(max_length=255)),
                        ("fingerprint", models.CharField(max_length=64)),
                        ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                        ("response_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                        ("response_body", models.JSONField(blank=True, null=True)),
                        (
                            "customer",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "idempotency_keys",
                        "ordering": ["-id"],
                        "indexes": [models.Index(fields=["created_at"], name="idempotency_keys_created_idx")],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("customer", "key"), name="idempotency_keys_customer_key_uniq"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
