"""``idempotency_keys`` belongs to the checkout app now (its migration 0001 takes the model's state): payments forgets
the model without touching the table."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("payments", "0009_payment_session_sweep_lease"),
        ("checkout", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="IdempotencyKey")],
            database_operations=[],
        ),
    ]
