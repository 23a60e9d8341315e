"""bench.cpu's rows "through DRF's dispatch" measure the same endpoint's work: the endpoint served by DRF's request
handling answers what the endpoint answers, and counts it on /metrics as the endpoint does."""

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
def drf_handler(settings):
    """The WSGI handler of bench.cpu's worker, with the endpoints through DRF routed (the settings fixture restores the
    URLconf); as Django's test client does, a request does not close the test's connection when it ends."""
    assert cpu._drf_views()
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
def test_the_refusal_through_drf_answers_and_counts_as_the_checkout_endpoint(drf_handler):
    token = _token()
    body = json.dumps({"items": [{"product_id": cpu._product("sold_out"), "qty": 1}]}).encode()
    cpu._request(drf_handler, "POST", "/v1/checkout", 409, body, token)()  # from the database: now remembered
    endpoint = cpu._request(drf_handler, "POST", "/v1/checkout", 409, body, token)
    through_drf = cpu._request(drf_handler, "POST", f"/{cpu.DRF_PREFIX}checkout", 409, body, token)
    before = _count("stock_conflict")
    assert json.loads(through_drf()) == json.loads(endpoint())
    assert _count("stock_conflict") == before + 2


@pytest.mark.django_db
def test_the_signed_poll_and_join_through_drf_answer_as_their_endpoints(drf_handler):
    token = _token()
    polls = cpu._queue_polls(drf_handler, token)
    assert json.loads(polls["queue_poll_drf"]()) == json.loads(polls["queue_poll"]())
    for name, prefix in (("queue_join", "/v1/"), ("queue_join_drf", f"/{cpu.DRF_PREFIX}")):
        joins, clear = cpu._queue_joins(drf_handler, 1, name=name, prefix=prefix)
        answer = json.loads(joins[name]())  # 201, a new pass
        assert (answer["state"], answer["poll_url"].startswith("/v1/queue/passes/")) == ("waiting", True)
        clear[name]()


@pytest.mark.django_db
def test_an_unauthenticated_request_through_drf_is_refused_as_the_endpoint_refuses_it(drf_handler):
    """Control: DRF's dispatch is not a way around authentication, so its figure includes it."""
    body = json.dumps({"items": [{"product_id": cpu._product("sold_out"), "qty": 1}]}).encode()
    with pytest.raises(RuntimeError, match=r"expected 409, got 401 .*unauthorized"):
        cpu._request(drf_handler, "POST", f"/{cpu.DRF_PREFIX}checkout", 409, body, "not-a-token")()
