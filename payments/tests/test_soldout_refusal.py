"""``POST /v1/checkout`` for a product this worker remembers sold out (``inventory.soldout``): refused before the
checkout's transaction, with the answer the database's refusal gives, after every check that comes before the memory
(authentication, the body, the rate limit, too many units); a keyed checkout never answered from the memory."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from payments import api as api_module
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


# --- answered before DRF's dispatch (payments.api.remembered_sold_out) ------------------------------------------


def same_answer(fast, drf):
    """The same status, body bytes and headers (but the request id, which is each request's own)."""
    assert (fast.status_code, fast.content) == (drf.status_code, drf.content)
    headers = {name: value for name, value in fast.items() if name != "X-Request-ID"}
    assert headers == {name: value for name, value in drf.items() if name != "X-Request-ID"}


@pytest.fixture
def posts(monkeypatch):
    """The requests that reached the view's ``post`` through DRF's dispatch."""
    seen = []
    post = api_module.CheckoutApi.post

    def recording(self, request, *args, **kwargs):
        seen.append(request.method)
        return post(self, request, *args, **kwargs)

    monkeypatch.setattr(api_module.CheckoutApi, "post", recording)
    return seen


def test_a_remembered_refusal_answered_before_drfs_dispatch_is_drfs_answer_byte_for_byte(
    memory_on, api, make_product, monkeypatch, posts, settings
):
    """Each request is sent twice: answered by remembered_sold_out, then with it off (DRF's dispatch answers every
    request): the same status, bytes and headers, whether the memory refuses it or any check before refuses it."""
    sold_out, other_sold_out, in_stock = make_product(stock=0), make_product(stock=0), make_product(stock=5)
    for product in (sold_out, other_sold_out):
        assert buy(api, product.pk).status_code == 409  # remembered now
    del posts[:]
    anonymous, stranger = APIClient(), APIClient()
    stranger.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    items = lambda *pairs: {"items": [{"product_id": pid, "qty": qty} for pid, qty in pairs]}  # noqa: E731
    remembered = [  # (body, status): refused by the memory
        (items((sold_out.pk, 1)), 409),
        (items((other_sold_out.pk, 2), (sold_out.pk, 1)), 409),  # both, ascending ids
        (items((sold_out.pk, 1), (sold_out.pk, 1)), 409),  # one product listed twice
        (items((in_stock.pk, 1), (sold_out.pk, 3)), 409),  # one of them remembered is enough
    ]
    for body, status in remembered:
        before = (counted("stock_conflict"), metrics.CHECKOUT_LATENCY._sum.get())
        fast = api.post("/v1/checkout", body, format="json")
        assert counted("stock_conflict") == before[0] + 1  # counted and timed on /metrics like any answer
        assert metrics.CHECKOUT_LATENCY._sum.get() > before[1]
        with monkeypatch.context() as off:
            off.setattr(api_module, "remembered_sold_out", lambda request: None)
            drf = api.post("/v1/checkout", body, format="json")
        assert fast.status_code == status
        same_answer(fast, drf)
    assert len(posts) == len(remembered)  # control: only the requests with the memory off reached DRF's view

    refused_first = [  # each refused by a check before the memory: DRF's dispatch answers both
        (anonymous, items((sold_out.pk, 1)), {}, 401),
        (stranger, items((sold_out.pk, 1)), {}, 401),
        (api, items((sold_out.pk, 0)), {}, 400),
        (api, items((sold_out.pk, settings.CHECKOUT_MAX_QTY), (sold_out.pk, 1)), {}, 400),
        (api, {"items": []}, {}, 400),
        (api, items((sold_out.pk, 1)), {"HTTP_IDEMPOTENCY_KEY": ""}, 400),
        (api, b'{"items": [', {}, 400),
        (api, b"", {}, 400),
        (api, json.dumps(items((sold_out.pk, 1))).encode(), {"content_type": "text/plain"}, 415),
    ]
    for client, body, extra, status in refused_first:
        answers = []
        for _ in range(2):  # with remembered_sold_out, then without it
            with monkeypatch.context() as off:
                if answers:
                    off.setattr(api_module, "remembered_sold_out", lambda request: None)
                if isinstance(body, bytes):
                    kwargs = {"content_type": "application/json", **extra}  # as a client sends raw bytes
                    answers.append(client.generic("POST", "/v1/checkout", body, **kwargs))
                else:
                    answers.append(client.post("/v1/checkout", body, format="json", **extra))
        assert answers[0].status_code == status, answers[0].content
        same_answer(*answers)

    del posts[:]
    charset = api.generic(
        "POST", "/v1/checkout", json.dumps(items((sold_out.pk, 1))), content_type="application/json; charset=utf-8"
    )
    assert charset.status_code == 409  # another Content-Type is DRF's parser's: refused from the memory there
    assert buy(api, in_stock.pk).status_code == 201  # control: a product not remembered is checked out
    assert len(posts) == 2  # both through DRF's dispatch
