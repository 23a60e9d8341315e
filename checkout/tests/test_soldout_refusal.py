"""``POST /v1/checkout`` for a product this worker remembers sold out (``inventory.soldout``): refused before the
checkout's transaction, with the answer the database's refusal gives, after every check that comes before the memory
(authentication, the body, too many units) and before the rate limit counts it; a keyed checkout never answered from
the memory."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from checkout import services as checkout
from skincare import metrics

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory_on(settings):
    settings.SOLD_OUT_CACHE_MS = 250  # as in production (the suite turns it off)


def buy(client, product_id, qty=1, **headers):
    return client.post("/v1/checkout", {"items": [{"product_id": product_id, "qty": qty}]}, format="json", **headers)


def statements(captured):
    """What reached the database, without the SAVEPOINT bookkeeping of the test's own transaction."""
    return [q["sql"] for q in captured if "SAVEPOINT" not in q["sql"]]


def answer(response):
    return response.status_code, response.content, response.get("Content-Type"), response.get("Retry-After")


def counted(outcome):
    return metrics.CHECKOUT_REQUESTS.labels(outcome=outcome)._value.get()


@pytest.fixture
def transactions(monkeypatch):
    """The checkouts that entered the checkout's transaction (``checkout.services._place``)."""
    entered = []
    run = checkout._place

    def recording(**kwargs):
        entered.append(kwargs["customer"].pk)
        return run(**kwargs)

    monkeypatch.setattr(checkout, "_place", recording)
    return entered


def test_a_remembered_sold_out_product_is_refused_before_the_transaction_with_the_databases_answer(
    memory_on, api, make_product, transactions
):
    sold_out = make_product(stock=0)
    decided_by_database = buy(api, sold_out.pk)  # the quote read says short: remembered now
    assert decided_by_database.status_code == 409
    assert decided_by_database.json()["code"] == "stock_conflict"
    assert len(transactions) == 1
    before = counted("stock_conflict")

    with CaptureQueriesContext(connection) as captured:
        from_memory = buy(api, sold_out.pk)
    assert answer(from_memory) == answer(decided_by_database)
    assert statements(captured) == []
    assert len(transactions) == 1  # the refusal did not enter the transaction
    assert counted("stock_conflict") == before + 1  # still counted on /metrics

    in_stock = make_product(stock=5)  # control: a product that is not remembered goes through the transaction
    assert buy(api, in_stock.pk).status_code == 201
    assert len(transactions) == 2


def test_every_check_before_the_memory_still_answers_first(memory_on, api, make_product, settings):
    """The order of the checks (``checkout.services.checkout_place``): authentication, the body and too many units of a
    product are answered before a product remembered sold out is refused; the rate limit after it."""
    sold_out = make_product(stock=0)
    assert buy(api, sold_out.pk).status_code == 409  # remembered now
    assert buy(api, sold_out.pk).status_code == 409  # control: from the memory

    assert buy(APIClient(), sold_out.pk).status_code == 401
    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    assert buy(stranger, sold_out.pk).status_code == 401
    assert buy(api, sold_out.pk, qty=0).json()["code"] == "invalid_request"
    too_many = buy(api, sold_out.pk, qty=settings.CHECKOUT_MAX_QTY + 1)
    assert (too_many.status_code, too_many.json()["code"]) == (400, "invalid_request")
    assert buy(api, sold_out.pk, HTTP_IDEMPOTENCY_KEY="").status_code == 400
    anonymous = APIClient()
    items = lambda *pairs: {"items": [{"product_id": pid, "qty": qty} for pid, qty in pairs]}  # noqa: E731
    refused_first = [  # each refused by a check before the memory, in the bytes it has always been answered in
        (anonymous, items((sold_out.pk, 1)), {}, 401, b'{"error":"Authentication credentials were not provided.",'),
        (stranger, items((sold_out.pk, 1)), {}, 401, b'{"error":"Invalid, expired or revoked token.",'),
        (api, items((sold_out.pk, 0)), {}, 400, b'{"error":"Some items are invalid.","code":"invalid_request",'),
        (
            api,
            items((sold_out.pk, settings.CHECKOUT_MAX_QTY), (sold_out.pk, 1)),
            {},
            400,
            f'{{"error":"At most {settings.CHECKOUT_MAX_QTY} units of one product per order.","code":"invalid_request",'
            f'"fields":{{"items":["product {sold_out.pk}: {settings.CHECKOUT_MAX_QTY + 1} units"]}}}}'.encode(),
        ),
        (api, {"items": []}, {}, 400, b'{"error":"`items` must be a non-empty list.","code":"invalid_request",'),
        (api, items((sold_out.pk, 1)), {"HTTP_IDEMPOTENCY_KEY": ""}, 400, b'{"error":"Idempotency-Key must be 1 to'),
        (api, b'{"items": [', {}, 400, b'{"error":"Request body is not valid JSON.","code":"malformed_json"}'),
        (api, b"", {}, 400, b'{"error":"`items` is required.","code":"invalid_request",'),
        (api, json.dumps(items((sold_out.pk, 1))).encode(), {"content_type": "text/plain"}, 415, b'{"error":'),
    ]
    for client, body, extra, status, content in refused_first:
        if isinstance(body, bytes):
            kwargs = {"content_type": "application/json", **extra}  # as a client sends raw bytes
            response = client.generic("POST", "/v1/checkout", body, **kwargs)
        else:
            response = client.post("/v1/checkout", body, format="json", **extra)
        assert (response.status_code, response["Content-Type"]) == (status, "application/json"), response.content
        assert response.content.startswith(content), response.content
        assert response["Allow"] == "POST, OPTIONS"
        if status == 401:
            assert response["WWW-Authenticate"] == 'Bearer realm="api"'

    settings.CHECKOUT_RATE_LIMIT = "1/hour"
    assert buy(api, sold_out.pk).status_code == 409  # from the memory: not counted
    in_stock = make_product(stock=5)
    assert buy(api, in_stock.pk).status_code == 201  # the first within the limit
    assert buy(api, in_stock.pk).status_code == 429  # control: the limit holds
    assert buy(api, sold_out.pk).status_code == 409  # the memory answers before the count, over the limit too


def test_a_keyed_replay_of_a_bought_key_gets_its_201_while_the_product_is_remembered_sold_out(
    memory_on, api, make_product, transactions
):
    product = make_product(stock=1)
    bought = buy(api, product.pk, HTTP_IDEMPOTENCY_KEY="buy-once")
    assert bought.status_code == 201
    assert buy(api, product.pk).status_code == 409  # the last unit is gone: remembered now
    with CaptureQueriesContext(connection) as captured:
        assert buy(api, product.pk).status_code == 409  # control: an unkeyed checkout is answered from the memory
    assert statements(captured) == []

    replayed = buy(api, product.pk, HTTP_IDEMPOTENCY_KEY="buy-once")
    assert replayed.status_code == 201
    assert replayed.content == bought.content
    assert replayed["Idempotent-Replayed"] == "true"

    refused = buy(api, product.pk, HTTP_IDEMPOTENCY_KEY="too-late")  # a new key: its refusal is stored under it
    assert (refused.status_code, refused.json()["code"]) == (409, "stock_conflict")
    again = buy(api, product.pk, HTTP_IDEMPOTENCY_KEY="too-late")
    assert (again.status_code, again.json()) == (409, refused.json())  # as stored (jsonb orders the keys)
    assert again["Idempotent-Replayed"] == "true"


# --- with the rate limit on ----------------------------------------------------------------------------------


def rate_limit_hits(customer_id):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(hits), 0) FROM rate_limit_counters WHERE scope = 'checkout' AND subject = %s",
            [str(customer_id)],
        )
        return cursor.fetchone()[0]


def test_a_remembered_refusal_is_not_counted_and_asks_nothing_with_the_rate_limit_on(
    memory_on, api, customer, make_product, settings, transactions
):
    """With ``CHECKOUT_RATE_LIMIT`` on (production's choice) a remembered sold-out refusal makes no statement: the
    sold-out memory is asked before the limit counts, so the refusal takes nothing and is not counted; the same
    status, bytes and headers as the database's refusal."""
    settings.CHECKOUT_RATE_LIMIT = "3/hour"
    sold_out = make_product(stock=0)
    decided_by_database = buy(api, sold_out.pk)  # counted (1), then refused by the quote read: remembered now
    assert (decided_by_database.status_code, decided_by_database.json()["code"]) == (409, "stock_conflict")
    assert rate_limit_hits(customer.pk) == 1
    before = counted("stock_conflict")

    for _ in range(5):  # more than the limit
        with CaptureQueriesContext(connection) as captured:
            from_memory = buy(api, sold_out.pk)
        assert statements(captured) == []
        assert answer(from_memory) == answer(decided_by_database)
        headers = {name: value for name, value in from_memory.items() if name != "X-Request-ID"}
        assert headers == {name: value for name, value in decided_by_database.items() if name != "X-Request-ID"}
        assert from_memory["Allow"] == "POST, OPTIONS"
    assert counted("stock_conflict") == before + 5  # counted on /metrics like any answer
    assert rate_limit_hits(customer.pk) == 1  # not counted against the limit
    assert len(transactions) == 1

    in_stock = make_product(stock=5)  # control: every checkout that reaches the database counts
    assert [buy(api, in_stock.pk).status_code for _ in range(3)] == [201, 201, 429]
    assert rate_limit_hits(customer.pk) == 4
    assert len(transactions) == 3
