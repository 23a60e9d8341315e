"""The foundation's writes: customer API tokens, rate-limit counters, and the id sequences' advance after a restore."""

import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models.functions import Now

from skincare import demo
from skincare.db import db_now
from skincare.models import ApiToken, api_token_digest
from skincare.selectors import forget_user


@transaction.atomic
def api_token_issue(*, user: User, token: str | None = None, ttl_seconds: int | None = None) -> str:
    """Store a new token of ``user`` (its digest only) and return the token; it cannot be read back later.

    ``token`` is generated (256 random bits) unless given (the labelled demo token of the demo data).
    ``ttl_seconds`` defaults to ``API_TOKEN_TTL_SECONDS``; None means the token does not expire. The expiry is
    computed from the database's clock. Other tokens of the user are left alone (see ``api_tokens_revoke``).
    """
    token = token if token is not None else secrets.token_urlsafe(32)
    ttl = settings.API_TOKEN_TTL_SECONDS if ttl_seconds is None else ttl_seconds
    expires_at = None if ttl is None else db_now() + timedelta(seconds=ttl)
    ApiToken.objects.create(user=user, digest=api_token_digest(token), expires_at=expires_at)
    return token


@transaction.atomic
def api_tokens_revoke(*, user: User) -> int:
    """Revoke every token of ``user`` that is not revoked yet (database clock). Returns how many."""
    revoked = ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=Now())
    # This process stops accepting them at once; others on their next read of the feed the triggers write.
    transaction.on_commit(lambda: forget_user(user.pk))
    return revoked


_RATE_LIMIT_HIT_SQL = """
INSERT INTO rate_limit_counters (scope, subject, window_start, hits)
VALUES (%(scope)s, %(subject)s, to_timestamp(floor(extract(epoch FROM now()) / %(window)s) * %(window)s), 1)
ON CONFLICT (scope, subject) DO UPDATE SET
    hits = CASE WHEN rate_limit_counters.window_start = EXCLUDED.window_start
                THEN rate_limit_counters.hits + 1 ELSE 1 END,
    window_start = EXCLUDED.window_start
RETURNING hits, GREATEST(1, ceil(extract(epoch FROM window_start + make_interval(secs => %(window)s) - now())))::int
"""


@transaction.atomic
def rate_limit_hit(*, scope: str, subject: str, limit: int, window_seconds: int) -> int | None:
    """Count one hit of ``subject`` in the current fixed window (aligned to the epoch, database clock) and return
    None while the window holds at most ``limit`` hits, else the seconds until the window ends (Retry-After).

    One upsert: concurrent hits of one subject serialize on its counter row for that one statement, so the count
    is exact across every process. Refused hits are counted too (a client hammering the limit stays limited).
    """
    with connection.cursor() as cursor:
        cursor.execute(_RATE_LIMIT_HIT_SQL, {"scope": scope, "subject": subject, "window": window_seconds})
        hits, retry_after = cursor.fetchone()
    return None if hits <= limit else retry_after


def delete_older_than(*, table: str, column: str, seconds: int, batch_size: int = 1000) -> int:
    """Delete rows of ``table`` whose ``column`` is older than ``seconds`` by the database clock, in batches of
    ``batch_size`` (each its own short transaction, so a big backlog never holds locks for long). ``table`` and
    ``column`` are names from code, never from input. Returns how many rows were deleted."""
    deleted = 0
    sql = (
        f"DELETE FROM {table} WHERE ctid = ANY(ARRAY("
        f"SELECT ctid FROM {table} WHERE {column} < now() - make_interval(secs => %s) LIMIT %s))"
    )
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [seconds, batch_size])
            count = cursor.rowcount
        deleted += count
        if count < batch_size:
            return deleted


def api_token_invalidations_prune() -> int:
    """The feed is read over its last minute (``skincare.selectors``): rows older than an hour are history."""
    return delete_older_than(table="api_token_invalidations", column="at", seconds=3600)


def rate_limit_counters_prune() -> int:
    """Counters whose window ended more than a day ago (the longest window) carry no information any more."""
    return delete_older_than(table="rate_limit_counters", column="window_start", seconds=2 * 86400)


@transaction.atomic
def demo_accounts_disable() -> list[str]:
    """Make the published demo accounts unusable (``manage.py remove_demo_data``): the demo users are deactivated
    with unusable passwords (kept, with their order history) and every token with the demo token's digest is
    deleted. Returns what was changed."""
    changed = []
    for user in User.objects.select_for_update().filter(username__in=demo.DEMO_USERS, is_active=True):
        user.is_active = False
        user.set_unusable_password()
        user.save(update_fields=["is_active", "password"])
        api_tokens_revoke(user=user)
        changed.append(f"user {user.get_username()!r} deactivated")
    deleted, _ = ApiToken.objects.filter(digest=api_token_digest(demo.DEMO_CUSTOMER_TOKEN)).delete()
    if deleted:
        changed.append(f"the demo token {demo.DEMO_CUSTOMER_TOKEN!r} deleted")
    return changed


# Ids never come again after a restore to a moment: the orders, payment attempts, reservations… issued between the
# restore's target and the moment the damage was found are known to customers and to the gateway, but not to the
# restored copy, whose sequences stand where they stood at the target. Each sequence of the schema jumps ahead by
# SEQUENCE_RESTORE_GAP: more ids than the shop can issue in the lost window (a billion: 27 hours at 10,000 a second,
# far above any measured rate), and a bigint sequence has room for nine billion such jumps.
SEQUENCE_RESTORE_GAP = 1_000_000_000
SEQUENCES_ADVANCE_SQL = """
SELECT s.sequencename, s.last_value,
       setval(format('%%I.%%I', s.schemaname, s.sequencename)::regclass, COALESCE(s.last_value, 0) + %s)
  FROM pg_sequences s
 WHERE s.schemaname = current_schema()
 ORDER BY s.sequencename
"""


@transaction.atomic
def sequences_advance(*, gap: int = SEQUENCE_RESTORE_GAP) -> list[tuple[str, int | None, int]]:
    """Move every id sequence of the schema ``gap`` past its last value (after a restore to a moment, before the
    copy takes writes: docs/runbooks/restore.md#undo-a-mistake-restore-to-a-moment). Returns (sequence, last value, new value) for each."""
    if gap < 1:
        raise ValueError("the gap must be a positive number of ids")
    with connection.cursor() as cursor:
        cursor.execute(SEQUENCES_ADVANCE_SQL, [gap])
        return [(name, last, new) for name, last, new in cursor.fetchall()]
