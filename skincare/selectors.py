"""The foundation's reads: who an API token belongs to, with a per-process memory of valid tokens that follows the
feed of invalidations (``api_token_invalidations``, written by database triggers) about once a second."""

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

# The feed's recent rows, by the database's clock. Rows are written by triggers (migration
# skincare/0005_api_token_invalidations) whenever an api_tokens row is updated or deleted or a user deactivated.
_FEED_SQL = """
SELECT id, user_id FROM api_token_invalidations WHERE at > now() - make_interval(secs => %s)
"""

MAX_ENTRIES = 50_000
# A process with tokens remembered reads the feed at most once per FEED_INTERVAL_SECONDS (one statement) and forgets
# the tokens of every user named by a row it has not processed yet. A row's id is assigned at insert, not at commit,
# so "id > the last id seen" could miss a row committed late: each read takes every row of the last
# FEED_WINDOW_SECONDS and remembers the ids it saw. A row is caught as long as its transaction commits within
# FEED_WINDOW_SECONDS - FEED_GAP_SECONDS of its insert: a process that has not read the feed for FEED_GAP_SECONDS
# trusts nothing it remembers until it has read the feed again. API_TOKEN_CACHE_SECONDS bounds every memory anyway.
FEED_INTERVAL_SECONDS = 1.0
FEED_WINDOW_SECONDS = 60
FEED_GAP_SECONDS = 30.0
clock: Callable[[], float] = time.monotonic
# digest -> (monotonic time until which the token is known valid, its user). The same user instance answers every
# request of the token while it is remembered (building a model instance costs about 0.01 ms a request): a request
# reads it, never changes it.
_valid: dict[str, tuple[float, User]] = {}
_lock = threading.Lock()


class _Feed:
    """This process's place in the feed: when it last read it, the ids that read returned, and a sequence number
    bumped when a read starts and when it ends (odd while a read is under way): a lookup during which a read ran
    is not remembered, since that read may have processed a revocation the lookup did not see."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.read_at: float | None = None  # monotonic start of the last completed read
        self.seen: frozenset[int] = frozenset()
        self.seq = 0


_feed = _Feed()


def _customer(user_id: int, username: str) -> User:
    user = User(id=user_id, username=username, is_active=True)
    user._state.adding = False
    user._state.db = "default"
    return user


def api_token_user(*, token: str) -> User | None:
    """The active user a live token belongs to, or None. Revoked tokens and tokens past ``expires_at`` (by the
    database's clock) do not authenticate.

    A valid token is remembered by this process for at most ``API_TOKEN_CACHE_SECONDS`` (0 = off), and never past
    its own expiry (the remaining lifetime is measured with the database's ``now()`` read in the same query). While
    it has tokens remembered, the process reads the feed of invalidations at most once per second and forgets the
    users it names. So a request costs no query while its token is remembered (one feed read per process per
    second), and **revoking a token, deactivating or deleting its user takes effect in every process within about
    a second** (one feed interval; at once in the process that revoked it), and within ``API_TOKEN_CACHE_SECONDS``
    in any case. Invalid tokens are never remembered: each one costs its query and answers 401.
    """
    if settings.API_TOKEN_CACHE_SECONDS <= 0:
        return _lookup(api_token_digest(token), remember_it=False)
    _feed_follow()
    digest = api_token_digest(token)
    entry = _valid.get(digest)
    if entry is not None:
        if clock() < entry[0]:
            return entry[1]
        _valid.pop(digest, None)
    return _lookup(digest, remember_it=True)


def _lookup(digest: str, *, remember_it: bool) -> User | None:
    seq = _feed.seq
    with connection.cursor() as cursor:
        cursor.execute(_USER_BY_DIGEST_SQL, [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    user_id, username, expires_at, db_now = row
    user = _customer(user_id, username)
    if remember_it:
        remember(digest=digest, user=user, expires_at=expires_at, db_now=db_now, feed_seq=seq)
    return user


def _feed_follow() -> None:
    """Read the feed when due: every FEED_INTERVAL_SECONDS while tokens are remembered, and before trusting a new
    token when the last read is older than FEED_GAP_SECONDS (a memory that old is dropped first, unread)."""
    now = clock()
    read_at = _feed.read_at
    if read_at is not None and now - read_at < FEED_INTERVAL_SECONDS:
        return  # the request's usual path: read less than a second ago
    with _lock:
        age = float("inf") if _feed.read_at is None else now - _feed.read_at
        stale = age > FEED_GAP_SECONDS
        if stale:
            _valid.clear()
        due = stale or (bool(_valid) and age >= FEED_INTERVAL_SECONDS)
        if not due or _feed.seq % 2:
            return  # not due, or another thread of this process is reading it now
        _feed.seq += 1
    try:
        with connection.cursor() as cursor:
            cursor.execute(_FEED_SQL, [FEED_WINDOW_SECONDS])
            rows = cursor.fetchall()
        with _lock:
            gone = {user_id for row_id, user_id in rows if row_id not in _feed.seen}
            if gone:
                for digest in [d for d, entry in _valid.items() if entry[1].pk in gone]:
                    _valid.pop(digest, None)
            _feed.seen = frozenset(row_id for row_id, _ in rows)
            _feed.read_at = now
    finally:
        with _lock:
            _feed.seq += 1


def remember(*, digest: str, user: User, expires_at: datetime | None, db_now: datetime, feed_seq: int) -> None:
    """Remember a token a lookup found valid, unless a feed read ran during the lookup (``feed_seq`` is the feed's
    sequence number read before it)."""
    seconds = float(settings.API_TOKEN_CACHE_SECONDS)
    if expires_at is not None:
        seconds = min(seconds, (expires_at - db_now).total_seconds())
    if seconds <= 0:
        return
    with _lock:
        if feed_seq % 2 or _feed.seq != feed_seq:
            return
        if len(_valid) >= MAX_ENTRIES:
            _valid.clear()
        _valid[digest] = (clock() + seconds, user)


def forget_user(user_id: int) -> None:
    """Drop this process's memory of ``user_id``'s tokens (called when they are revoked here)."""
    with _lock:
        for digest in [d for d, entry in _valid.items() if entry[1].pk == user_id]:
            _valid.pop(digest, None)


def forget_all() -> None:
    """Drop the memory and the place in the feed (a fresh process)."""
    with _lock:
        _valid.clear()
        _feed.reset()
