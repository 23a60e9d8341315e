from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ('skincare', '0003_hash_legacy_drf_tokens'),
    ]

    operations = [
        migrations.AddField(
            model_name='adminloginfailure',
            name='device',
            field=models.CharField(blank=True, default='', max_length=32),
        ),
        # Built CONCURRENTLY: the table takes writes (every failed admin login) while the index is built.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name='adminloginfailure',
                    index=models.Index(fields=['device', 'failed_at'], name='admin_login_fail_device_idx'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'CREATE INDEX CONCURRENTLY IF NOT EXISTS "admin_login_fail_device_idx" '
                    'ON "admin_login_failures" ("device", "failed_at")',
                    reverse_sql='DROP INDEX CONCURRENTLY IF EXISTS "admin_login_fail_device_idx"',
                ),
            ],
        ),
    ]
