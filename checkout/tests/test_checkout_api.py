"""POST /v1/checkout through the API: the happy path, and a table of bad inputs that must each get a clear
4xx JSON error and change nothing."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection

from devtools.testing import assert_invariants
from inventory.models import Inventory, StockMovement
from orders.models import Order, Reservation
from payments.models import PaymentAttempt

pytestmark = pytest.mark.django_db


def db_state():
    return (
        Order.objects.count(),
        Reservation.objects.count(),
        PaymentAttempt.objects.count(),
        StockMovement.objects.count(),
        sorted(Inventory.objects.values_list("product_id", "available_stock", "reserved_stock", "version")),
    )


def test_checkout_creates_pending_order_with_reservations_from_the_database_clock(api, make_product, settings):
    settings.RESERVATION_TTL_SECONDS = 900
    serum = make_product(stock=5, price="129000.00")
    toner = make_product(stock=3, price="99000.50")

    response = api.post(
        "/v1/checkout",
        {
            "items": [
                {"product_id": toner.pk, "qty": 1},
                {"product_id": serum.pk, "qty": 2},
                {"product_id": toner.pk, "qty": 1},
            ]
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "pending_payment"
    assert body["total"] == "456001.00"
    assert body["items"] == [
        {"product_id": serum.pk, "qty": 2, "unit_price": "129000.00"},
        {"product_id": toner.pk, "qty": 2, "unit_price": "99000.50"},  # duplicate lines merged
    ]
    order = Order.objects.get(pk=body["order_id"])
    assert order.customer == api.customer
    assert order.total == Decimal("456001.00")
    with connection.cursor() as cursor:
        cursor.execute("SELECT created_at FROM orders WHERE id = %s", [order.pk])
        (created_at,) = cursor.fetchone()
    # The deadline is the transaction's now() + TTL, and the order's created_at is within that transaction.
    assert abs(order.payment_expires_at - (created_at + timedelta(seconds=900))) < timedelta(seconds=1)
    reservations = list(Reservation.objects.filter(order=order).order_by("product_id"))
    assert [(r.product_id, r.qty, r.status) for r in reservations] == [(serum.pk, 2, "active"), (toner.pk, 2, "active")]
    assert {r.expires_at for r in reservations} == {order.payment_expires_at}
    assert PaymentAttempt.objects.get(order=order).status == "pending"
    assert PaymentAttempt.objects.get(order=order).amount == order.total
    assert Inventory.objects.get(product=serum).available_stock == 3
    assert Inventory.objects.get(product=toner).reserved_stock == 2
    assert_invariants()


def test_insufficient_stock_is_409_naming_every_short_product_and_changes_nothing(api, make_product):
    a, b, c = make_product(stock=1), make_product(stock=5), make_product(stock=0)
    before = db_state()

    response = api.post(
        "/v1/checkout",
        {"items": [{"product_id": a.pk, "qty": 2}, {"product_id": b.pk, "qty": 1}, {"product_id": c.pk, "qty": 1}]},
        format="json",
    )

    assert response.status_code == 409
    assert response.json()["code"] == "stock_conflict"
    assert response.json()["product_ids"] == [a.pk, c.pk]
    assert db_state() == before


def test_unknown_or_inactive_product_is_422(api, make_product):
    active = make_product(stock=5)
    inactive = make_product(stock=5, is_active=False)
    before = db_state()

    response = api.post(
        "/v1/checkout",
        {
            "items": [
                {"product_id": active.pk, "qty": 1},
                {"product_id": inactive.pk, "qty": 1},
                {"product_id": 987654, "qty": 1},
            ]
        },
        format="json",
    )

    assert response.status_code == 422
    assert response.json() == {
        "error": "One or more products do not exist or are not for sale.",
        "code": "invalid_product",
        "product_ids": sorted([inactive.pk, 987654]),
    }
    assert db_state() == before


BAD_BODIES = [
    ("malformed json", b'{"items": [', "malformed_json"),
    ("not an object", b"[1, 2]", "invalid_request"),
    ("items missing", b"{}", "invalid_request"),
    ("items null", b'{"items": null}', "invalid_request"),
    ("items empty", b'{"items": []}', "invalid_request"),
    ("items not a list", b'{"items": {"product_id": 1, "qty": 1}}', "invalid_request"),
    ("item not an object", b'{"items": [7]}', "invalid_request"),
    ("qty missing", b'{"items": [{"product_id": PID}]}', "invalid_request"),
    ("qty zero", b'{"items": [{"product_id": PID, "qty": 0}]}', "invalid_request"),
    ("qty negative", b'{"items": [{"product_id": PID, "qty": -1}]}', "invalid_request"),
    ("qty float", b'{"items": [{"product_id": PID, "qty": 1.5}]}', "invalid_request"),
    ("qty string", b'{"items": [{"product_id": PID, "qty": "1"}]}', "invalid_request"),
    ("qty boolean", b'{"items": [{"product_id": PID, "qty": true}]}', "invalid_request"),
    ("qty absurd", b'{"items": [{"product_id": PID, "qty": 1000000000000}]}', "invalid_request"),
    (
        "qty over the per-product limit once merged",
        b'{"items": [{"product_id": PID, "qty": 60}, {"product_id": PID, "qty": 60}]}',
        "invalid_request",
    ),
    ("product_id string", b'{"items": [{"product_id": "PID", "qty": 1}]}', "invalid_request"),
    ("product_id zero", b'{"items": [{"product_id": 0, "qty": 1}]}', "invalid_request"),
    ("product_id beyond bigint", b'{"items": [{"product_id": 99999999999999999999, "qty": 1}]}', "invalid_request"),
    ("too many lines", b'{"items": [' + b",".join([b'{"product_id": PID, "qty": 1}'] * 21) + b"]}", "invalid_request"),
]


@pytest.mark.parametrize(("body", "code"), [(b, c) for _, b, c in BAD_BODIES], ids=[n for n, _, _ in BAD_BODIES])
def test_bad_input_is_400_with_a_clear_json_error_and_changes_nothing(api, make_product, body, code):
    product = make_product(stock=1000)
    before = db_state()

    response = api.generic(
        "POST", "/v1/checkout", body.replace(b"PID", str(product.pk).encode()), content_type="application/json"
    )

    assert response.status_code == 400, response.content
    payload = response.json()
    assert payload["code"] == code
    assert isinstance(payload["error"], str) and payload["error"]
    assert db_state() == before


def test_wrong_content_type_is_415(api, make_product):
    product = make_product(stock=5)
    response = api.generic(
        "POST", "/v1/checkout", f"product_id={product.pk}", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


@pytest.mark.parametrize("header", [None, "Bearer nope", "Token test-customer-token", "Bearer", "Basic dXNlcjpwYXNz"])
def test_missing_or_invalid_token_is_401(client, make_product, header):
    product = make_product(stock=5)
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    before = db_state()

    response = client.post(
        "/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, content_type="application/json", **extra
    )

    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert db_state() == before


def test_unexpected_failure_is_a_logged_500_without_internals(api, make_product, monkeypatch, caplog):
    product = make_product(stock=5)

    def explode(**kwargs):
        raise RuntimeError("secret internal detail: connection string postgres://admin:hunter2@db")

    monkeypatch.setattr("checkout.api.checkout_place", explode)
    response = api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json")

    assert response.status_code == 500
    assert response.json() == {"error": "Internal server error.", "code": "internal_error"}
    assert "hunter2" not in response.content.decode()
    assert any("hunter2" in str(record.exc_info[1]) for record in caplog.records if record.exc_info)
