"""Revocations reach every process through the database: a token remembered by this process (process A, the
module's memory and the test's connection) is refused within one feed read (``selectors.FEED_INTERVAL_SECONDS``)
after another process (a thread with its own connection, committing) invalidates it by any path: the service, an
ORM/admin ``update``, raw SQL, deactivating the user, deleting the token or the user. Control: with the feed read
returning nothing (the naive memory) A keeps accepting the revoked token.

A revocation committed after a later-inserted one (ids are assigned at insert, not at commit) is still seen;
control: an "id > the last id seen" reader would have skipped it. Statements: requests with a remembered token cost
one feed read per interval, not one lookup per request. Time moves with the module's injectable ``clock``."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from devtools.testing import ThreadRun
from skincare import selectors, services
from skincare.models import ApiToken, ApiTokenInvalidation
from skincare.tests.test_token_cache import FakeClock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.token_feed]

NOTHING_SQL = "SELECT id, user_id FROM api_token_invalidations WHERE false AND at > now() - make_interval(secs => %s)"


@pytest.fixture
def clock(monkeypatch, settings):
    settings.API_TOKEN_CACHE_SECONDS = 300
    fake = FakeClock()
    monkeypatch.setattr(selectors, "clock", fake)
    return fake


@pytest.fixture
def elsewhere(monkeypatch):
    """Run ``func`` as another process would: its own connection, committed, and without touching this process's
    memory (the revoking process's own ``forget_user`` is that process's, not ours)."""
    monkeypatch.setattr(services, "forget_user", lambda user_id: None)

    def run(func):
        outcome = ThreadRun(func, name="process-b").join()
        assert outcome.error is None, outcome.error
        return outcome.value

    return run


def statements(captured, table):
    return [q["sql"] for q in captured if table in q["sql"]]


def authenticate(token):
    """One request's authentication in process A: the user (or None), its token lookups and its feed reads."""
    with CaptureQueriesContext(connection) as captured:
        user = selectors.api_token_user(token=token)
    return user, statements(captured, "FROM api_tokens"), statements(captured, "api_token_invalidations")


def _service(user):
    services.api_tokens_revoke(user=user)


def _orm_update(user):
    ApiToken.objects.filter(user_id=user.pk).update(revoked_at=Now())


def _raw_sql(user):
    with connection.cursor() as cursor:
        cursor.execute("UPDATE api_tokens SET revoked_at = now() WHERE user_id = %s", [user.pk])


def _expiry_moved(user):
    with connection.cursor() as cursor:
        cursor.execute("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE user_id = %s", [user.pk])


def _deactivate(user):
    User.objects.filter(pk=user.pk).update(is_active=False)


def _delete_token(user):
    ApiToken.objects.filter(user_id=user.pk).delete()


def _delete_user(user):
    User.objects.get(pk=user.pk).delete()


INVALIDATIONS = [_service, _orm_update, _raw_sql, _expiry_moved, _deactivate, _delete_token, _delete_user]


@pytest.mark.parametrize("invalidate", INVALIDATIONS, ids=lambda f: f.__name__.strip("_"))
def test_an_invalidation_elsewhere_is_refused_within_one_feed_read(invalidate, clock, elsewhere, make_customer):
    customer = make_customer()
    bystander = make_customer()
    assert authenticate(customer.api_token)[0].pk == customer.pk
    assert authenticate(bystander.api_token)[0].pk == bystander.pk
    assert authenticate(customer.api_token)[1:] == ([], [])  # remembered: no statement

    elsewhere(lambda: invalidate(customer))
    assert authenticate(customer.api_token)[0].pk == customer.pk  # the feed was read less than a second ago

    clock.now += selectors.FEED_INTERVAL_SECONDS
    user, lookups, feed_reads = authenticate(customer.api_token)
    assert user is None and len(feed_reads) == 1 and len(lookups) == 1
    again, lookups, feed_reads = authenticate(bystander.api_token)  # other users' tokens stay remembered
    assert again.pk == bystander.pk and (lookups, feed_reads) == ([], [])


@pytest.mark.parametrize("invalidate", [_service, _raw_sql, _deactivate], ids=lambda f: f.__name__.strip("_"))
def test_control_without_the_feed_the_revoked_token_keeps_working(
    invalidate, clock, elsewhere, make_customer, monkeypatch
):
    monkeypatch.setattr(selectors, "_FEED_SQL", NOTHING_SQL)
    customer = make_customer()
    assert authenticate(customer.api_token)[0].pk == customer.pk
    elsewhere(lambda: invalidate(customer))
    for _ in range(5):
        clock.now += selectors.FEED_INTERVAL_SECONDS
        user, lookups, feed_reads = authenticate(customer.api_token)
        assert user.pk == customer.pk and lookups == [] and len(feed_reads) == 1


def test_a_revocation_committed_after_a_later_one_is_still_seen(clock, elsewhere, make_customer):
    late, early = make_customer(), make_customer()
    for customer in (late, early):
        assert authenticate(customer.api_token)[0].pk == customer.pk
    inserted, release = threading.Event(), threading.Event()

    def revoke_and_hold():
        with transaction.atomic():
            _raw_sql(late)  # the trigger's row gets its id now...
            inserted.set()
            assert release.wait(60)
        # ...and becomes visible only here, after a row with a higher id

    holder = ThreadRun(revoke_and_hold, name="late-commit")
    assert inserted.wait(60)
    elsewhere(lambda: _raw_sql(early))

    clock.now += selectors.FEED_INTERVAL_SECONDS
    assert authenticate(early.api_token)[0] is None
    assert authenticate(late.api_token)[0].pk == late.pk  # not committed yet: still valid
    highest_seen = max(selectors._feed.seen)

    release.set()
    assert holder.join().error is None
    late_id = ApiTokenInvalidation.objects.get(user_id=late.pk).pk
    assert late_id < highest_seen  # control: an "id > the last id seen" reader never looks at it again

    clock.now += selectors.FEED_INTERVAL_SECONDS
    assert authenticate(late.api_token)[0] is None


def test_requests_with_a_remembered_token_cost_one_feed_read_per_interval(clock, make_customer):
    customer = make_customer()
    assert authenticate(customer.api_token)[0].pk == customer.pk
    intervals, per_interval = 5, 40
    with CaptureQueriesContext(connection) as captured:
        for _ in range(intervals):
            clock.now += selectors.FEED_INTERVAL_SECONDS
            for _ in range(per_interval):
                assert selectors.api_token_user(token=customer.api_token).pk == customer.pk
    assert len(statements(captured, "api_token_invalidations")) == intervals
    assert len(captured) == intervals  # no lookup: 200 requests, 5 statements


def test_a_memory_not_followed_for_longer_than_the_gap_is_dropped(clock, make_customer):
    """A process whose last feed read is older than FEED_GAP_SECONDS could have missed a row (the feed is read over
    FEED_WINDOW_SECONDS): it trusts nothing it remembers until it has read the feed and looked the token up."""
    customer = make_customer()
    assert authenticate(customer.api_token)[0].pk == customer.pk
    clock.now += selectors.FEED_GAP_SECONDS + 0.1
    user, lookups, feed_reads = authenticate(customer.api_token)
    assert user.pk == customer.pk and len(lookups) == 1 and len(feed_reads) == 1


def test_a_lookup_overtaken_by_a_feed_read_is_not_remembered(clock, make_customer):
    """A feed read that ran while a lookup was under way may have processed a revocation the lookup did not see:
    the lookup's answer is used once, not remembered."""
    customer = make_customer()
    assert authenticate(customer.api_token)[0].pk == customer.pk
    seq = selectors._feed.seq  # a lookup starts here...
    clock.now += selectors.FEED_INTERVAL_SECONDS
    assert len(authenticate(customer.api_token)[2]) == 1  # ...a feed read runs meanwhile...
    selectors.forget_user(customer.pk)
    user = selectors._customer(customer.pk, customer.username)
    selectors.remember(digest="0" * 64, user=user, expires_at=None, db_now=None, feed_seq=seq)  # ...then it ends
    assert "0" * 64 not in selectors._valid
    selectors.remember(digest="0" * 64, user=user, expires_at=None, db_now=None, feed_seq=selectors._feed.seq)
    assert "0" * 64 in selectors._valid  # a lookup no read overtook is remembered


def test_feed_rows_older_than_an_hour_are_pruned(make_customer):
    customer = make_customer()
    services.api_tokens_revoke(user=customer)
    ApiTokenInvalidation.objects.create(user_id=customer.pk, at=Now() - timedelta(hours=2))
    assert services.api_token_invalidations_prune() == 1
    assert list(ApiTokenInvalidation.objects.values_list("user_id", flat=True)) == [customer.pk]
