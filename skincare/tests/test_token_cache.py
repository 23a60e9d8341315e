"""The per-process memory of valid API tokens (``skincare.selectors.api_token_user``): no query per request while
a token is remembered, revocation here is immediate, and a token is never remembered past its own expiry nor past
``API_TOKEN_CACHE_SECONDS`` (even when the feed of invalidations, skincare/tests/test_token_feed.py, misses one)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from skincare import selectors, services

pytestmark = [pytest.mark.django_db, pytest.mark.token_feed]


class FakeClock:
    """Test-only: this process's monotonic clock, moved by hand (the database's clock still decides expiry)."""

    def __init__(self):
        self.now = 5000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch, settings):
    settings.API_TOKEN_CACHE_SECONDS = 10
    fake = FakeClock()
    monkeypatch.setattr(selectors, "clock", fake)
    return fake


def token_queries(captured):
    return [q["sql"] for q in captured if "api_tokens" in q["sql"]]


def lookup(token):
    with CaptureQueriesContext(connection) as captured:
        user = selectors.api_token_user(token=token)
    return user, token_queries(captured)


def test_a_remembered_token_costs_no_query(clock, make_customer):
    customer = make_customer()
    first, queries = lookup(customer.api_token)
    assert first.pk == customer.pk and len(queries) == 1
    again, queries = lookup(customer.api_token)
    assert again.pk == customer.pk and queries == []


def test_revoking_in_this_process_is_immediate(clock, make_customer, django_capture_on_commit_callbacks):
    customer = make_customer()
    assert lookup(customer.api_token)[0].pk == customer.pk
    with django_capture_on_commit_callbacks(execute=True):
        services.api_tokens_revoke(user=customer)
    user, queries = lookup(customer.api_token)
    assert user is None and len(queries) == 1


def test_a_revocation_the_feed_misses_is_refused_within_the_cache_window(clock, make_customer, monkeypatch):
    """Another worker revoked the token and the feed did not name it (simulated by a feed read that returns
    nothing): this process accepts it until its memory runs out, and never longer than API_TOKEN_CACHE_SECONDS."""
    monkeypatch.setattr(
        selectors,
        "_FEED_SQL",
        "SELECT id, user_id FROM api_token_invalidations WHERE false AND at > now() - make_interval(secs => %s)",
    )
    customer = make_customer()
    assert lookup(customer.api_token)[0].pk == customer.pk
    with connection.cursor() as cursor:
        cursor.execute("UPDATE api_tokens SET revoked_at = now() WHERE user_id = %s", [customer.pk])

    for _ in range(9):
        clock.now += 1.1  # a request a second: the feed is followed, and says nothing
        assert lookup(customer.api_token)[0].pk == customer.pk
    clock.now += 0.2
    user, queries = lookup(customer.api_token)
    assert user is None and len(queries) == 1


def test_a_token_is_not_remembered_past_its_expiry(clock, make_customer):
    customer = make_customer()
    token = services.api_token_issue(user=customer, ttl_seconds=3)  # expires 3 s from now by the database clock
    assert lookup(token)[0].pk == customer.pk
    clock.now += 2.9
    assert lookup(token)[1] == []  # still inside its lifetime: remembered
    clock.now += 0.2
    assert len(lookup(token)[1]) == 1  # past the lifetime it was remembered for: asked again


def test_invalid_tokens_are_never_remembered(clock):
    for _ in range(2):
        user, queries = lookup("not-a-token")
        assert user is None and len(queries) == 1


def test_off_when_zero(settings, make_customer):
    settings.API_TOKEN_CACHE_SECONDS = 0
    customer = make_customer()
    for _ in range(2):
        user, queries = lookup(customer.api_token)
        assert user.pk == customer.pk and len(queries) == 1
