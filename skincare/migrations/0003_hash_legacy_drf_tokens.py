"""Move DRF authtoken rows (plaintext keys) to api_tokens as SHA-256 digests, then drop the plaintext table.

Existing tokens keep working; a database dump no longer contains a usable token. Databases that never had
rest_framework.authtoken are left alone.
"""

from django.db import migrations


def hash_legacy_tokens(cursor):
    cursor.execute("SELECT to_regclass('authtoken_token') IS NOT NULL")
    if not cursor.fetchone()[0]:
        return
    cursor.execute(
        """
        INSERT INTO api_tokens (user_id, digest, created_at)
        SELECT user_id, encode(sha256(convert_to(key, 'UTF8')), 'hex'), created FROM authtoken_token
        ON CONFLICT (digest) DO NOTHING
        """
    )
    cursor.execute("DROP TABLE authtoken_token")
    cursor.execute("DELETE FROM django_migrations WHERE app = 'authtoken'")


def forwards(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        hash_legacy_tokens(cursor)


class Migration(migrations.Migration):
    dependencies = [("skincare", "0002_api_tokens_rate_limits")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
