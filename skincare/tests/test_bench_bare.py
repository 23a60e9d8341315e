"""bench.cpu's rows "its view without DRF's dispatch" measure the same endpoint's work: the plain Django view that
calls the endpoint's own method answers what the endpoint answers, and counts it on /metrics as the endpoint does."""

import io
import json

import pytest
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.db import close_old_connections
from django.urls import clear_url_caches

from bench import cpu
from skincare import metrics


@pytest.fixture
def bare_handler(settings):
    """The WSGI handler of bench.cpu's worker, with the bare views routed (the settings fixture restores the
    URLconf); as Django's test client does, a request does not close the test's connection when it ends."""
    assert cpu._bare_views()
    clear_url_caches()
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
        clear_url_caches()


def _token() -> str:
    out = io.StringIO()
    call_command("issue_token", cpu.CUSTOMER, stdout=out)
    return out.getvalue().strip()


def _count(outcome: str) -> float:
    return metrics.CHECKOUT_REQUESTS.labels(outcome=outcome)._value.get()


@pytest.mark.django_db
def test_the_bare_refusal_answers_and_counts_as_the_checkout_endpoint(bare_handler):
    token = _token()
    body = json.dumps({"items": [{"product_id": cpu._product("sold_out"), "qty": 1}]}).encode()
    cpu._request(bare_handler, "POST", "/v1/checkout", 409, body, token)()  # from the database: now remembered
    endpoint = cpu._request(bare_handler, "POST", "/v1/checkout", 409, body, token)
    bare = cpu._request(bare_handler, "POST", f"/{cpu.BARE_PREFIX}checkout", 409, body, token)
    before = _count("stock_conflict")
    assert json.loads(bare()) == json.loads(endpoint())
    assert _count("stock_conflict") == before + 2


@pytest.mark.django_db
def test_the_bare_signed_poll_and_join_answer_as_their_endpoints(bare_handler):
    token = _token()
    polls = cpu._queue_polls(bare_handler, token)
    assert json.loads(polls["queue_poll_bare"]()) == json.loads(polls["queue_poll"]())
    for name, prefix in (("queue_join", "/v1/"), ("queue_join_bare", f"/{cpu.BARE_PREFIX}")):
        joins, clear = cpu._queue_joins(bare_handler, 1, name=name, prefix=prefix)
        answer = json.loads(joins[name]())  # 201, a new pass
        assert (answer["state"], answer["poll_url"].startswith("/v1/queue/passes/")) == ("waiting", True)
        clear[name]()


@pytest.mark.django_db
def test_an_unauthenticated_bare_request_is_refused_as_the_endpoint_refuses_it(bare_handler):
    """Control: the bare view is not a way around authentication, so its figure includes it."""
    body = json.dumps({"items": [{"product_id": cpu._product("sold_out"), "qty": 1}]}).encode()
    with pytest.raises(RuntimeError, match=r"expected 409, got 401 .*unauthorized"):
        cpu._request(bare_handler, "POST", f"/{cpu.BARE_PREFIX}checkout", 409, body, "not-a-token")()
