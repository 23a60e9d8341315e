"""The cart endpoints through the API: every answer and code, and "nothing written" for every refusal."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from carts.models import Cart, CartItem
from checkout import idempotency
from checkout.models import IdempotencyKey
from devtools.testing import assert_invariants
from inventory.models import Inventory, StockBucket
from inventory.services import stock_adjust
from inventory.tests.test_sale_window import set_window
from orders.models import Order
from payments.models import PaymentAttempt

pytestmark = pytest.mark.django_db


def state():
    """Everything a cart request could change."""
    return (
        sorted(Cart.objects.values_list("id", "status", "expires_at", "order_id", "updated_at")),
        sorted(CartItem.objects.values_list("cart_id", "product_id", "qty")),
        Order.objects.count(),
        PaymentAttempt.objects.count(),
        sorted(Inventory.objects.values_list("product_id", "available_stock", "reserved_stock", "version")),
    )


def client_of(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    return client


def create(api, items):
    response = api.post("/v1/carts", {"items": items}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def expire(cart_id):
    """Test setup only: close the cart's window by the database clock."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE carts SET expires_at = now() - interval '1 second' WHERE id = %s", [cart_id])


def test_create_returns_the_cart_with_prices_and_an_expiry_by_the_database_clock(api, make_product, settings):
    settings.CART_TTL_SECONDS = 600
    serum, toner = make_product(stock=5, price="12.50"), make_product(stock=1, price="3.00")

    body = create(
        api,
        [{"product_id": toner.pk, "qty": 2}, {"product_id": serum.pk, "qty": 1}, {"product_id": toner.pk, "qty": 1}],
    )

    assert body["status"] == "open" and body["order_id"] is None
    assert body["total"] == "21.50"
    assert body["items"] == [
        {
            "product_id": serum.pk,
            "qty": 1,
            "unit_price": "12.50",
            "for_sale": True,
            "available_stock": 5,
            "in_stock": True,
            "sale": None,
        },
        {
            "product_id": toner.pk,
            "qty": 3,
            "unit_price": "3.00",
            "for_sale": True,
            "available_stock": 1,
            "in_stock": False,
            "sale": None,
        },
    ]  # duplicate lines merged; a cart may ask for more than is on sale now (the checkout decides)
    cart = Cart.objects.get(pk=body["cart_id"])
    assert cart.customer == api.customer
    with connection.cursor() as cursor:
        cursor.execute("SELECT expires_at - created_at FROM carts WHERE id = %s", [cart.pk])
        assert cursor.fetchone()[0] == timedelta(seconds=600)
    # A cart holds no stock.
    assert Inventory.objects.get(product=toner).reserved_stock == 0
    assert Order.objects.count() == 0


def test_cart_ids_are_random_uuids(api, make_product):
    product = make_product()
    ids = {create(api, [{"product_id": product.pk, "qty": 1}])["cart_id"] for _ in range(3)}
    assert len(ids) == 3
    assert all(uuid.UUID(cart_id).version == 4 for cart_id in ids)


BAD_BODIES = [
    ({}, 400, "invalid_request"),
    ({"items": []}, 400, "invalid_request"),
    ({"items": [{"product_id": "1", "qty": 1}]}, 400, "invalid_request"),
    ({"items": [{"product_id": 1, "qty": 0}]}, 400, "invalid_request"),
    ({"items": [{"product_id": 1, "qty": True}]}, 400, "invalid_request"),
    ([1, 2], 400, "invalid_request"),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_BODIES)
def test_create_and_replace_refuse_a_malformed_body_like_checkout(api, make_product, body, status, code):
    cart = create(api, [{"product_id": make_product().pk, "qty": 1}])
    before = state()

    created = api.post("/v1/carts", body, format="json")
    replaced = api.put(f"/v1/carts/{cart['cart_id']}", body, format="json")

    for response in (created, replaced):
        assert (response.status_code, response.json()["code"]) == (status, code)
    assert state() == before


def test_more_units_than_checkout_allows_is_a_400_nothing_written(api, make_product, settings):
    settings.CHECKOUT_MAX_QTY = 5
    product = make_product(stock=50)
    cart = create(api, [{"product_id": product.pk, "qty": 1}])
    before = state()
    items = {"items": [{"product_id": product.pk, "qty": 3}, {"product_id": product.pk, "qty": 3}]}

    created = api.post("/v1/carts", items, format="json")
    replaced = api.put(f"/v1/carts/{cart['cart_id']}", items, format="json")

    for response in (created, replaced):
        assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert state() == before


def test_unknown_or_inactive_product_is_a_422_nothing_written(api, make_product):
    product, hidden = make_product(), make_product(is_active=False)
    cart = create(api, [{"product_id": product.pk, "qty": 1}])
    before = state()
    items = {"items": [{"product_id": product.pk, "qty": 1}, {"product_id": hidden.pk, "qty": 1}]}

    created = api.post("/v1/carts", items, format="json")
    replaced = api.put(f"/v1/carts/{cart['cart_id']}", items, format="json")
    unknown = api.post("/v1/carts", {"items": [{"product_id": 2**62, "qty": 1}]}, format="json")

    for response in (created, replaced):
        assert response.status_code == 422
        assert response.json()["code"] == "invalid_product"
        assert response.json()["product_ids"] == [hidden.pk]
    assert unknown.json()["code"] == "invalid_product"
    assert state() == before


def test_get_shows_current_prices_and_availability_in_one_query(api, make_product):
    serum, toner = make_product(stock=5, price="10.00"), make_product(stock=5, price="4.00")
    cart = create(api, [{"product_id": serum.pk, "qty": 2}, {"product_id": toner.pk, "qty": 1}])
    serum.price = "11.00"
    serum.save()
    toner.is_active = False
    toner.save()
    StockBucket.objects.filter(product=serum, bucket=0).update(available_stock=1)
    api.get(f"/v1/carts/{cart['cart_id']}")  # the token is remembered after its first use

    with CaptureQueriesContext(connection) as queries:
        response = api.get(f"/v1/carts/{cart['cart_id']}")

    assert response.status_code == 200
    body = response.json()
    assert body["items"] == [
        {
            "product_id": serum.pk,
            "qty": 2,
            "unit_price": "11.00",
            "for_sale": True,
            "available_stock": 1,
            "in_stock": False,
            "sale": None,
        },
        {
            "product_id": toner.pk,
            "qty": 1,
            "unit_price": None,
            "for_sale": False,
            "available_stock": 5,
            "in_stock": False,
            "sale": None,
        },
    ]
    assert body["total"] == "22.00"
    assert len(queries) == 1, [q["sql"] for q in queries]
    assert "FOR " not in queries[0]["sql"].upper().replace("FORMAT", "")  # no lock of any kind


def test_unknown_foreign_and_malformed_cart_ids_are_404(api, make_customer, make_product):
    product = make_product()
    theirs = create(client_of(make_customer()), [{"product_id": product.pk, "qty": 1}])
    before = state()

    for cart_id in (theirs["cart_id"], str(uuid.uuid4()), "not-a-uuid", "1"):
        answers = [
            api.get(f"/v1/carts/{cart_id}"),
            api.put(f"/v1/carts/{cart_id}", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json"),
            api.post(f"/v1/carts/{cart_id}/checkout"),
        ]
        for response in answers:
            assert (response.status_code, response.json()["code"]) == (404, "cart_not_found"), cart_id
    assert state() == before


def test_replace_swaps_the_items_and_moves_the_expiry(api, make_product):
    first, second = make_product(), make_product(price="7.00")
    cart = create(api, [{"product_id": first.pk, "qty": 1}])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE carts SET expires_at = now() + interval '5 seconds' WHERE id = %s", [cart["cart_id"]])

    response = api.put(f"/v1/carts/{cart['cart_id']}", {"items": [{"product_id": second.pk, "qty": 2}]}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert [(item["product_id"], item["qty"]) for item in body["items"]] == [(second.pk, 2)]
    assert list(CartItem.objects.filter(cart_id=cart["cart_id"]).values_list("product_id", "qty")) == [(second.pk, 2)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT expires_at - now() FROM carts WHERE id = %s", [cart["cart_id"]])
        assert cursor.fetchone()[0] > timedelta(seconds=1700)  # moved to now() + CART_TTL_SECONDS (1800)


def test_an_expired_cart_is_410_on_get_put_and_checkout_nothing_written(api, make_product):
    product = make_product(stock=5)
    cart = create(api, [{"product_id": product.pk, "qty": 1}])
    expire(cart["cart_id"])
    before = state()

    answers = [
        api.get(f"/v1/carts/{cart['cart_id']}"),
        api.put(f"/v1/carts/{cart['cart_id']}", {"items": [{"product_id": product.pk, "qty": 2}]}, format="json"),
        api.post(f"/v1/carts/{cart['cart_id']}/checkout"),
    ]

    for response in answers:
        assert (response.status_code, response.json()["code"]) == (410, "cart_expired")
    assert state() == before
    assert_invariants()


def test_checkout_gives_the_same_201_body_as_v1_checkout(api, make_product):
    product = make_product(stock=5, price="9.00")
    cart = create(api, [{"product_id": product.pk, "qty": 2}])

    response = api.post(f"/v1/carts/{cart['cart_id']}/checkout")
    direct = api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 2}]}, format="json")

    assert response.status_code == 201, response.content
    body, other = response.json(), direct.json()
    assert set(body) == set(other)
    assert {k: v for k, v in body.items() if k not in ("order_id", "payment_expires_at", "payment_url")} == {
        k: v for k, v in other.items() if k not in ("order_id", "payment_expires_at", "payment_url")
    }
    assert body["status"] == "pending_payment" and body["total"] == "18.00"
    assert Cart.objects.get(pk=cart["cart_id"]).order_id == body["order_id"]
    assert Inventory.objects.get(product=product).reserved_stock == 4
    assert_invariants()


def test_a_checked_out_cart_is_409_with_its_order_and_get_shows_it(api, make_product):
    product = make_product(stock=5)
    cart = create(api, [{"product_id": product.pk, "qty": 1}])
    order_id = api.post(f"/v1/carts/{cart['cart_id']}/checkout").json()["order_id"]
    before = state()

    again = api.post(f"/v1/carts/{cart['cart_id']}/checkout")
    edit = api.put(f"/v1/carts/{cart['cart_id']}", {"items": [{"product_id": product.pk, "qty": 2}]}, format="json")
    shown = api.get(f"/v1/carts/{cart['cart_id']}")

    for response in (again, edit):
        assert response.status_code == 409
        assert response.json()["code"] == "cart_checked_out"
        assert response.json()["order_id"] == order_id
    assert shown.status_code == 200
    assert (shown.json()["status"], shown.json()["order_id"]) == ("checked_out", order_id)
    assert state() == before
    # A checked-out cart stays checked out even after its expiry: 409 naming the order, not 410.
    expire(cart["cart_id"])
    late = api.post(f"/v1/carts/{cart['cart_id']}/checkout")
    assert (late.status_code, late.json()["code"], late.json()["order_id"]) == (409, "cart_checked_out", order_id)


def test_checkout_refusals_are_the_checkouts_and_leave_the_cart_open(api, make_product, settings):
    settings.SOLD_OUT_CACHE_MS = 0  # the cart is retried right after a restock
    short, limited, gone = make_product(stock=1), make_product(stock=9, max_per_customer=1), make_product()
    conflict = create(api, [{"product_id": short.pk, "qty": 2}])
    over_limit = create(api, [{"product_id": limited.pk, "qty": 2}])
    invalid = create(api, [{"product_id": gone.pk, "qty": 1}])
    gone.is_active = False
    gone.save()
    before = state()

    answers = {
        "stock_conflict": api.post(f"/v1/carts/{conflict['cart_id']}/checkout"),
        "purchase_limit_exceeded": api.post(f"/v1/carts/{over_limit['cart_id']}/checkout"),
        "invalid_product": api.post(f"/v1/carts/{invalid['cart_id']}/checkout"),
    }

    assert {code: (r.status_code, r.json()["code"]) for code, r in answers.items()} == {
        "stock_conflict": (409, "stock_conflict"),
        "purchase_limit_exceeded": (409, "purchase_limit_exceeded"),
        "invalid_product": (422, "invalid_product"),
    }
    assert state() == before  # every cart still open, its expiry unmoved; no order
    # Fixed: the same cart checks out.
    stock_adjust(product_id=short.pk, delta=1, note="restock")
    fixed = api.post(f"/v1/carts/{conflict['cart_id']}/checkout")
    assert fixed.status_code == 201, fixed.content
    assert_invariants()


def test_checkout_too_many_pending_orders_and_rate_limit(api, make_product, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 1
    product = make_product(stock=9)
    first, second = (create(api, [{"product_id": product.pk, "qty": 1}]) for _ in range(2))
    assert api.post(f"/v1/carts/{first['cart_id']}/checkout").status_code == 201

    capped = api.post(f"/v1/carts/{second['cart_id']}/checkout")
    settings.CHECKOUT_RATE_LIMIT = "1/hour"
    api.post(f"/v1/carts/{second['cart_id']}/checkout")
    limited = api.post(f"/v1/carts/{second['cart_id']}/checkout")

    assert (capped.status_code, capped.json()["code"]) == (409, "too_many_pending_orders")
    assert (limited.status_code, limited.json()["code"]) == (429, "rate_limited")
    assert Cart.objects.get(pk=second["cart_id"]).status == "open"


def test_checkout_with_an_idempotency_key_replays_and_names_the_cart(api, make_product):
    product = make_product(stock=5)
    cart, other = (create(api, [{"product_id": product.pk, "qty": 1}]) for _ in range(2))
    headers = {"HTTP_IDEMPOTENCY_KEY": "cart-key-1"}

    first = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)
    replay = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)
    reused = api.post(f"/v1/carts/{other['cart_id']}/checkout", **headers)
    malformed = api.post(f"/v1/carts/{other['cart_id']}/checkout", HTTP_IDEMPOTENCY_KEY="\x7f")

    assert first.status_code == 201
    assert (replay.status_code, replay.json(), replay.headers["Idempotent-Replayed"]) == (201, first.json(), "true")
    assert (reused.status_code, reused.json()["code"]) == (422, "idempotency_key_reused")
    assert (malformed.status_code, malformed.json()["code"]) == (400, "invalid_request")
    assert Order.objects.count() == 1
    assert Cart.objects.get(pk=other["cart_id"]).status == "open"


def test_a_keyed_refusal_is_stored_and_the_cart_stays_open(api, make_product, settings):
    settings.SOLD_OUT_CACHE_MS = 0
    product = make_product(stock=1)
    cart = create(api, [{"product_id": product.pk, "qty": 2}])
    headers = {"HTTP_IDEMPOTENCY_KEY": "cart-key-2"}

    first = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)
    stock_adjust(product_id=product.pk, delta=4, note="restock")  # too late for this key
    replay = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)

    assert (first.status_code, first.json()["code"]) == (409, "stock_conflict")
    assert (replay.status_code, replay.json()) == (409, first.json())
    assert IdempotencyKey.objects.get(key="cart-key-2").response_status == 409
    assert Cart.objects.get(pk=cart["cart_id"]).status == "open"
    assert Order.objects.count() == 0
    assert api.post(f"/v1/carts/{cart['cart_id']}/checkout", HTTP_IDEMPOTENCY_KEY="cart-key-3").status_code == 201


def test_a_keyed_cart_checkout_before_the_sale_is_not_stored_and_the_same_key_buys_once_it_opens(api, make_product):
    """409 sale_not_started carries Retry-After: a client that retries the cart's checkout with the same key after the
    opening must get the order, not the refusal replayed (checkout.idempotency.replayable, the one rule for both
    endpoints)."""
    product = make_product(stock=5, price="20.00")
    set_window(product, starts_in=30, ends_in=3600, price="15.00")
    cart = create(api, [{"product_id": product.pk, "qty": 1}])
    headers = {"HTTP_IDEMPOTENCY_KEY": "opening-click"}
    before = state()

    early = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)

    assert (early.status_code, early.json()["code"]) == (409, "sale_not_started")
    assert int(early["Retry-After"]) >= 1
    assert "Idempotent-Replayed" not in early
    assert not IdempotencyKey.objects.filter(key="opening-click").exists()  # rolled back with the checkout
    assert state() == before  # the cart is still open, its expiry unmoved
    set_window(product, starts_in=-1, ends_in=3600, price="15.00")  # the sale opens
    bought = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)
    replayed = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)

    assert bought.status_code == 201, bought.content
    assert "Idempotent-Replayed" not in bought
    assert bought.json()["total"] == "15.00"
    assert (replayed.status_code, replayed.json(), replayed["Idempotent-Replayed"]) == (201, bought.json(), "true")
    assert IdempotencyKey.objects.get(key="opening-click").response_status == 201
    stored = Cart.objects.get(pk=cart["cart_id"])
    assert (stored.status, stored.order_id) == ("checked_out", bought.json()["order_id"])
    assert Order.objects.count() == 1
    assert_invariants()


def test_control_a_stored_sale_not_started_would_burn_the_carts_key(api, make_product, monkeypatch):
    """CONTROL: with the naive rule "store every 4xx under its key", the cart's retry after the opening replays the
    409 and the cart is never bought with that key."""
    monkeypatch.setattr(idempotency, "replayable", lambda exc: 400 <= exc.http_status < 500)
    product = make_product(stock=5)
    set_window(product, starts_in=30, ends_in=3600)
    cart = create(api, [{"product_id": product.pk, "qty": 1}])
    headers = {"HTTP_IDEMPOTENCY_KEY": "opening-click"}

    api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)
    set_window(product, starts_in=-1, ends_in=3600)
    after_opening = api.post(f"/v1/carts/{cart['cart_id']}/checkout", **headers)

    assert (after_opening.status_code, after_opening.json()["code"]) == (409, "sale_not_started")
    assert after_opening["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 0
    assert Cart.objects.get(pk=cart["cart_id"]).status == "open"


def test_carts_show_the_sale_price_and_window_and_checkout_refuses_outside_it_like_v1_checkout(api, make_product):
    on_sale, scheduled, ended = (make_product(stock=5, price="129.00") for _ in range(3))
    set_window(on_sale, starts_in=-60, ends_in=3600, price="99.00")
    set_window(scheduled, starts_in=90, ends_in=3600, price="99.00")
    set_window(ended, starts_in=-3600, ends_in=-60, price="99.00")
    carts = {p.pk: create(api, [{"product_id": p.pk, "qty": 1}]) for p in (on_sale, scheduled, ended)}
    before = state()

    shown = api.get(f"/v1/carts/{carts[on_sale.pk]['cart_id']}").json()["items"][0]
    not_yet = api.post(f"/v1/carts/{carts[scheduled.pk]['cart_id']}/checkout")
    too_late = api.post(f"/v1/carts/{carts[ended.pk]['cart_id']}/checkout")

    assert (carts[on_sale.pk]["items"][0]["unit_price"], shown["unit_price"], shown["sale"]) == (
        "99.00",
        "99.00",
        "open",
    )
    assert carts[scheduled.pk]["items"][0]["sale"] == "scheduled"
    assert (not_yet.status_code, not_yet.json()["code"], not_yet.headers["Retry-After"]) == (
        409,
        "sale_not_started",
        "90",
    )
    assert (too_late.status_code, too_late.json()["code"]) == (410, "sale_ended")
    assert state() == before  # both carts still open
    bought = api.post(f"/v1/carts/{carts[on_sale.pk]['cart_id']}/checkout")
    assert (bought.status_code, bought.json()["total"]) == (201, "99.00")


def test_cart_ttl_default_is_thirty_minutes():
    from django.conf import settings

    assert settings.CART_TTL_SECONDS == 1800
