"""Idempotent checkout with the ``Idempotency-Key`` header (IETF httpapi draft / Stripe semantics)."""

import io
import threading

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from checkout import idempotency
from checkout import services as checkouts
from checkout.models import IdempotencyKey
from devtools.testing import assert_invariants, run_concurrently
from inventory.models import Inventory, StockBucket, StockMovement
from orders.models import Order, Reservation
from payments.models import PaymentAttempt
from skincare.errors import ServiceBusy


def db_state():
    return (
        Order.objects.count(),
        Reservation.objects.count(),
        PaymentAttempt.objects.count(),
        StockMovement.objects.count(),
        IdempotencyKey.objects.count(),
        sorted(Inventory.objects.values_list("product_id", "available_stock", "reserved_stock")),
    )


def post(client, body, key=None, raw=None):
    extra = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    if raw is not None:
        return client.generic("POST", "/v1/checkout", raw, content_type="application/json", **extra)
    return client.post("/v1/checkout", body, format="json", **extra)


def client_for(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    return client


@pytest.mark.django_db
def test_same_key_same_body_replays_the_first_answer(api, make_product):
    product = make_product(stock=5)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}

    first = post(api, body, key="order-7f3a")
    # The same JSON document, spaced and ordered differently, is the same request.
    again = post(api, None, key="order-7f3a", raw=f'{{ "items" : [ {{"qty": 1, "product_id": {product.pk}}} ] }}')

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Order.objects.count() == 1
    assert Inventory.objects.get(product=product).reserved_stock == 1
    assert_invariants()


@pytest.mark.django_db
def test_same_key_different_body_is_422_and_writes_nothing(api, make_product):
    product = make_product(stock=5)
    post(api, {"items": [{"product_id": product.pk, "qty": 1}]}, key="k1")
    before = db_state()

    response = post(api, {"items": [{"product_id": product.pk, "qty": 2}]}, key="k1")

    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert db_state() == before


@pytest.mark.django_db
def test_keys_are_scoped_to_the_customer(make_product, make_customer):
    product = make_product(stock=5)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}
    alice, bob = client_for(make_customer()), client_for(make_customer())

    first, second = post(alice, body, key="shared"), post(bob, body, key="shared")

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["order_id"] != second.json()["order_id"]
    assert "Idempotent-Replayed" not in second


@pytest.mark.django_db
def test_without_the_header_every_request_is_a_new_checkout(api, make_product):
    product = make_product(stock=5)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}

    assert [post(api, body).status_code for _ in range(2)] == [201, 201]
    assert Order.objects.count() == 2
    assert IdempotencyKey.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key",
    ["", "x" * 256, "caf\u00e9", "tab\there", "nul\x00", "\x7f"],
    ids=["empty", "256", "latin1", "tab", "nul", "del"],
)
def test_invalid_keys_are_400_and_change_nothing(api, make_product, key):
    product = make_product(stock=5)
    before = db_state()

    response = post(api, {"items": [{"product_id": product.pk, "qty": 1}]}, key=key)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert db_state() == before


@pytest.mark.django_db
def test_longest_and_odd_but_valid_keys_work(api, make_product):
    product = make_product(stock=5)
    for key in ("x" * 255, " ~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"):
        assert post(api, {"items": [{"product_id": product.pk, "qty": 1}]}, key=key).status_code == 201


@pytest.mark.django_db
def test_domain_refusals_are_stored_and_replayed(api, make_product):
    product = make_product(stock=1)
    body = {"items": [{"product_id": product.pk, "qty": 2}]}

    first = post(api, body, key="short")
    StockBucket.objects.filter(product=product, bucket=0).update(available_stock=10)  # stock arrives afterwards
    again = post(api, body, key="short")

    assert first.status_code == again.status_code == 409
    assert again.json() == first.json()
    assert first.json()["code"] == "stock_conflict"
    assert again["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 0


@pytest.mark.django_db
def test_a_503_is_not_stored_and_the_retry_runs(api, make_product, monkeypatch):
    product = make_product(stock=5)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}
    real = checkouts.order_stock_reserve
    calls = []

    def busy_once(state):
        calls.append(1)
        if len(calls) == 1:
            raise ServiceBusy()
        return real(state)

    monkeypatch.setattr(checkouts, "order_stock_reserve", busy_once)

    busy = post(api, body, key="retry-me")
    retried = post(api, body, key="retry-me")

    assert busy.status_code == 503
    assert busy["Retry-After"] == "1"
    assert retried.status_code == 201
    assert "Idempotent-Replayed" not in retried
    assert Order.objects.count() == 1
    assert_invariants()


def keyed_checkout(customer, product_id, key):
    return checkouts.checkout_place(
        customer=customer,
        quantities={product_id: 1},
        key=key,
        fingerprint="f" * 64,
    )


def answer(result):
    """(status, order id) of a keyed checkout's answer."""
    if result.refusal is not None:
        return result.refusal.http_status, None
    return 201, result.order.order_id


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_requests_with_one_key_make_one_order(make_product, customer, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # the key alone must do it (and the control has no cap either)
    product = make_product(stock=100)

    outcomes = run_concurrently(50, lambda i: keyed_checkout(customer, product.pk, "storm"))

    assert [o.error for o in outcomes if o.error] == []
    results = [o.value for o in outcomes]
    assert {answer(r) for r in results} == {(201, Order.objects.get().pk)}
    assert sum(not r.replayed for r in results) == 1  # the others waited for it and replayed its answer
    assert Reservation.objects.count() == 1
    assert Inventory.objects.get(product=product).reserved_stock == 1
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_without_the_key_claim_fifty_retries_make_many_orders(make_product, customer, monkeypatch, settings):
    """The same storm against a naive claim (look the key up, and go ahead when it is not there yet): every request
    looks before any has written, so each one checks out."""
    from checkout.models import IdempotencyKey as Key

    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
    product = make_product(stock=100)
    all_looked = threading.Barrier(50)

    def naive_claim(*, customer, key, fingerprint):
        stored = Key.objects.filter(customer=customer, key=key).first()
        all_looked.wait(timeout=60)
        if stored is not None:
            return None  # used before: replay
        return 0  # "claimed": nothing blocks the others

    monkeypatch.setattr(idempotency, "claim_key", naive_claim)

    outcomes = run_concurrently(50, lambda i: keyed_checkout(customer, product.pk, "storm"))

    assert [o.error for o in outcomes if o.error] == []
    assert Order.objects.count() == 50
    assert Inventory.objects.get(product=product).reserved_stock == 50


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_waits_for_the_first_and_the_wait_is_bounded(make_product, customer, monkeypatch):
    """In progress: the second request with the key waits on the first one's row (here with a short lock_timeout it
    gives up with 503 busy and writes nothing); once the first commits, the same request replays its answer."""
    product = make_product(stock=5)
    inside, release = threading.Event(), threading.Event()
    real = checkouts.order_stock_reserve

    def held(state):
        if threading.current_thread().name == "first":
            inside.set()
            assert release.wait(timeout=60)
        return real(state)

    monkeypatch.setattr(checkouts, "order_stock_reserve", held)
    results = {}

    def first():
        try:
            results["first"] = keyed_checkout(customer, product.pk, "slow")
        finally:
            connection.close()

    thread = threading.Thread(target=first, name="first")
    thread.start()
    try:
        assert inside.wait(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
        with pytest.raises(ServiceBusy):
            keyed_checkout(customer, product.pk, "slow")
    finally:
        release.set()
        thread.join(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")

    replay = keyed_checkout(customer, product.pk, "slow")
    assert answer(results["first"])[0] == 201 and not results["first"].replayed
    assert (replay.order, replay.replayed) == (results["first"].order, True)
    assert Order.objects.count() == 1
    assert_invariants()


@pytest.mark.django_db
def test_keys_are_kept_for_their_ttl_then_pruned_and_reusable(api, make_product, settings):
    settings.IDEMPOTENCY_KEY_TTL_SECONDS = 3600
    product = make_product(stock=5)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}
    first = post(api, body, key="old")
    post(api, body, key="fresh")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE idempotency_keys SET created_at = now() - interval '3601 seconds' WHERE key = 'old'")

    # Expired but not pruned yet: the key is taken over as a new one.
    reused = post(api, body, key="old")
    assert reused.status_code == 201
    assert reused.json()["order_id"] != first.json()["order_id"]

    with connection.cursor() as cursor:
        cursor.execute("UPDATE idempotency_keys SET created_at = now() - interval '3601 seconds' WHERE key = 'old'")
    call_command("prune_retention", stdout=io.StringIO())
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["fresh"]


@pytest.mark.django_db
def test_stored_refusals_are_bounded_per_customer(api, make_product, make_customer, settings):
    """A client that sends a fresh key with every refused checkout (a bot on a sold-out product) cannot grow the
    table without bound: only the newest IDEMPOTENCY_MAX_STORED_REFUSALS refusals are kept; orders' keys stay."""
    settings.IDEMPOTENCY_MAX_STORED_REFUSALS = 3
    on_sale, sold_out = make_product(stock=5), make_product(stock=0)
    placed = post(api, {"items": [{"product_id": on_sale.pk, "qty": 1}]}, key="paid-for")
    other = client_for(make_customer())
    post(other, {"items": [{"product_id": sold_out.pk, "qty": 1}]}, key="other-0")

    answers = [post(api, {"items": [{"product_id": sold_out.pk, "qty": 1}]}, key=f"bot-{i}") for i in range(6)]

    assert placed.status_code == 201
    assert {a.status_code for a in answers} == {409}
    mine = IdempotencyKey.objects.filter(customer__username=placed.wsgi_request.user.username)
    assert sorted(mine.filter(response_status=409).values_list("key", flat=True)) == ["bot-3", "bot-4", "bot-5"]
    assert list(mine.filter(response_status=201).values_list("key", flat=True)) == ["paid-for"]
    assert IdempotencyKey.objects.filter(key="other-0").exists()  # another customer's refusals are their own
    # The newest refusal still replays; a forgotten one runs again (and is refused again, stored anew).
    assert post(api, {"items": [{"product_id": sold_out.pk, "qty": 1}]}, key="bot-5")["Idempotent-Replayed"] == "true"
    again = post(api, {"items": [{"product_id": sold_out.pk, "qty": 1}]}, key="bot-0")
    assert again.status_code == 409 and "Idempotent-Replayed" not in again


@pytest.mark.django_db(transaction=True)
def test_a_lock_busy_answer_is_not_stored_and_the_retry_with_the_same_key_succeeds(make_product, api):
    """``409 lock_busy`` (row_lock_nowait) carries Retry-After: a client honouring it retries with the same key and
    must get a checkout, not the refusal replayed until the key expires."""
    from inventory.models import InventoryStrategy
    from inventory.tests.test_strategies import hold_inventory_row

    product = make_product(stock=5, strategy=InventoryStrategy.ROW_LOCK_NOWAIT)
    body = {"items": [{"product_id": product.pk, "qty": 1}]}
    holder, release = hold_inventory_row(product)
    try:
        busy = post(api, body, key="retry-after-busy")
    finally:
        release.set()
    assert holder.join().error is None

    assert busy.status_code == 409
    assert busy.json()["code"] == "lock_busy"
    retried = post(api, body, key="retry-after-busy")
    assert retried.status_code == 201, retried.json()
    assert "Idempotent-Replayed" not in retried
    assert Order.objects.count() == 1
    assert post(api, body, key="retry-after-busy")["Idempotent-Replayed"] == "true"  # the success is what is kept
    assert_invariants()
