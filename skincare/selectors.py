"""The foundation's reads: who an API token belongs to (with a short per-process memory of valid tokens)."""

import threading
import time
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from skincare.models import api_token_digest

# One fixed statement on the unique digest index, joined with the user; the database's clock decides expiry, and
# ``now()`` comes back with the row so the memory below never outlives the token.
_USER_BY_DIGEST_SQL = """
SELECT u.id, u.username, t.expires_at, now()
FROM api_tokens t JOIN auth_user u ON u.id = t.user_id
WHERE t.digest = %s AND t.revoked_at IS NULL AND u.is_active
  AND (t.expires_at IS NULL OR t.expires_at > now())
LIMIT 1
"""

MAX_ENTRIES = 50_000
clock: Callable[[], float] = time.monotonic
# digest -> (monotonic time until which the token is known valid, its user). The same user instance answers every
# request of the token while it is remembered (building a model instance costs about 0.01 ms a request): a request
# reads it, never changes it.
_valid: dict[str, tuple[float, User]] = {}
_lock = threading.Lock()


def _customer(user_id: int, username: str) -> User:
    user = User(id=user_id, username=username, is_active=True)
    user._state.adding = False
    user._state.db = "default"
    return user


def api_token_user(*, token: str) -> User | None:
    """The active user a live token belongs to, or None. Revoked tokens and tokens past ``expires_at`` (by the
    database's clock) do not authenticate.

    A valid token is remembered by this process for ``API_TOKEN_CACHE_SECONDS`` (default 10; 0 = off), and never
    past its own expiry (the remaining lifetime is measured with the database's ``now()`` read in the same query).
    So a request costs no query while its token is remembered, and **revoking a token takes effect in other
    processes within ``API_TOKEN_CACHE_SECONDS``** (at once in the process that revoked it). Invalid tokens are
    never remembered: each one costs its query and answers 401.
    """
    digest = api_token_digest(token)
    entry = _valid.get(digest)
    if entry is not None:
        if clock() < entry[0]:
            return entry[1]
        _valid.pop(digest, None)
    with connection.cursor() as cursor:
        cursor.execute(_USER_BY_DIGEST_SQL, [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    user_id, username, expires_at, db_now = row
    user = _customer(user_id, username)
    remember(digest=digest, user=user, expires_at=expires_at, db_now=db_now)
    return user


def remember(*, digest: str, user: User, expires_at: datetime | None, db_now: datetime) -> None:
    seconds = float(settings.API_TOKEN_CACHE_SECONDS)
    if expires_at is not None:
        seconds = min(seconds, (expires_at - db_now).total_seconds())
    if seconds <= 0:
        return
    with _lock:
        if len(_valid) >= MAX_ENTRIES:
            _valid.clear()
        _valid[digest] = (clock() + seconds, user)


def forget_user(user_id: int) -> None:
    """Drop this process's memory of ``user_id``'s tokens (called when they are revoked here)."""
    with _lock:
        for digest in [d for d, entry in _valid.items() if entry[1].pk == user_id]:
            _valid.pop(digest, None)


def forget_all() -> None:
    with _lock:
        _valid.clear()
