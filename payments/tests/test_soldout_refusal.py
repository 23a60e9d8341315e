"""``POST /v1/checkout`` for a product this worker remembers sold out (``inventory.soldout``): refused before the
checkout's transaction, with the answer the database's refusal gives, after every check that comes before the memory
(authentication, the body, the rate limit, too many units); a keyed checkout never answered from the memory."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from payments import checkout
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
    """The checkouts that entered the checkout's transaction (``payments.checkout.checkout_transaction``)."""
    entered = []
    run = checkout.checkout_transaction

    def recording(**kwargs):
        entered.append(kwargs["customer"].pk)
        return run(**kwargs)

    monkeypatch.setattr(checkout, "checkout_transaction", recording)
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
    """The module docstring's order (payments/checkout.py): authentication, the body, the rate limit and too many
    units of a product are answered before a product remembered sold out is refused."""
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
    settings.CHECKOUT_RATE_LIMIT = "1/hour"
    assert buy(api, sold_out.pk).status_code == 409  # the first within the limit: counted, then refused
    assert buy(api, sold_out.pk).status_code == 429


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
