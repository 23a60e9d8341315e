"""One error code is one class: its fields are declared once, the constructor and the body derive from
them, and the bodies stay byte for byte what clients and stored idempotent replies already have."""

import json
from datetime import UTC, datetime

import pytest

from carts.exceptions import CartCheckedOut
from checkout.exceptions import IdempotencyKeyReused, RateLimited
from inventory.exceptions import SaleNotStarted, StaleStockVersion, StockConflict, StockWouldGoNegative
from orders.exceptions import PurchaseLimitExceeded
from skincare.errors import DomainError, InvalidInput, ServiceBusy, declared_errors
from waitingroom.exceptions import AdmissionRequired, QueueNotOpen

# The bodies as the hand-written data() methods built them before the fields were declared once (key order
# included: JSON bytes are compared).
BEFORE = [
    (
        InvalidInput("bad", fields={"items": ["x"]}),
        {},
        '{"error": "bad", "code": "invalid_request", "fields": {"items": ["x"]}}',
    ),
    (InvalidInput(), {}, '{"error": "The request is invalid.", "code": "invalid_request", "fields": {}}'),
    (
        ServiceBusy(),
        {"Retry-After": "1"},
        '{"error": "The shop is busy right now; please retry shortly.", "code": "busy"}',
    ),
    (
        StockConflict(product_ids=[9, 1], gave_up_after=3),
        {},
        '{"error": "Not enough stock for one or more products; refresh your cart.", "code": "stock_conflict", '
        '"product_ids": [1, 9], "gave_up_after": 3}',
    ),
    (
        StockWouldGoNegative(product_id=None, requested=-4),
        {},
        '{"error": "This change would push available stock below zero.", "code": "stock_would_go_negative", '
        '"product_id": null, "requested": -4}',
    ),
    (
        StaleStockVersion(product_id=1, expected_version=2, version=3),
        {},
        '{"error": "Stock changed while you were editing; reload and try again.", "code": "stale_version", '
        '"product_id": 1, "expected_version": 2, "version": 3}',
    ),
    (
        SaleNotStarted(
            product_ids=[3, 1], starts_at=datetime(2026, 12, 1, 13, 0, 0, 123456, tzinfo=UTC), retry_after_seconds=0
        ),
        {"Retry-After": "1"},
        '{"error": "The sale has not started yet; retry after the time in Retry-After.", "code": "sale_not_started", '
        '"product_ids": [1, 3], "starts_at": "2026-12-01T13:00:00.123456Z"}',
    ),
    (
        PurchaseLimitExceeded(product_ids=[3, 1]),
        {},
        '{"error": "This order would exceed the per-customer limit of one or more products.", '
        '"code": "purchase_limit_exceeded", "product_ids": [1, 3]}',
    ),
    (
        IdempotencyKeyReused(idempotency_key="k"),
        {},
        '{"error": "This Idempotency-Key was already used with a different request body.", '
        '"code": "idempotency_key_reused", "idempotency_key": "k"}',
    ),
    (
        RateLimited(retry_after_seconds=17, limit="20/minute"),
        {"Retry-After": "17"},
        '{"error": "Too many checkouts; retry after the time in Retry-After.", "code": "rate_limited", '
        '"retry_after": 17, "limit": "20/minute"}',
    ),
    (
        QueueNotOpen(product_id=1, opens_at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC), retry_after_seconds=5),
        {"Retry-After": "5"},
        '{"error": "The queue for this product is not open yet.", "code": "queue_not_open", "product_id": 1, '
        '"opens_at": "2026-01-01T12:00:00Z"}',
    ),
    (
        AdmissionRequired(
            product_ids=[3, 1], queue_urls=["/q/3", "/q/1"], pass_states=["none", "waiting"], retry_after_seconds=3
        ),
        {"Retry-After": "3"},
        '{"error": "This product sells through a queue: join it and check out when admitted.", '
        '"code": "admission_required", "product_ids": [3, 1], "queue_urls": ["/q/3", "/q/1"], '
        '"pass_states": ["none", "waiting"]}',
    ),
    (
        CartCheckedOut(cart_id="abc", order_id=4),
        {},
        '{"error": "This cart was already checked out.", "code": "cart_checked_out", "cart_id": "abc", "order_id": 4}',
    ),
]


@pytest.mark.parametrize("error, headers, body", BEFORE, ids=[type(e).__name__ for e, _, _ in BEFORE])
def test_bodies_and_headers_are_byte_for_byte_what_they_were(
    error: DomainError, headers: dict[str, str], body: str
) -> None:
    assert json.dumps(error.body()) == body
    assert error.headers == headers
    assert str(error) == error.message == json.loads(body)["error"]


def test_each_code_has_one_body_shape_its_declared_fields() -> None:
    """Every declared class's body keys are ``error``, ``code`` and its declared fields, whatever was passed."""
    assert StockConflict(product_ids=[1]).body().keys() == {"error", "code", "product_ids", "gave_up_after"}
    assert StockConflict("Custom.", product_ids=[1]).body()["error"] == "Custom."


def test_constructors_are_keyword_only_and_refuse_unknown_fields() -> None:
    with pytest.raises(TypeError):
        StockConflict("message", [1])  # type: ignore[misc]
    with pytest.raises(TypeError):
        StockConflict(product_ids=[1], gave_up=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        CartCheckedOut(cart_id="abc")  # type: ignore[call-arg]


def test_a_code_declared_twice_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match="error code 'stock_conflict' is declared twice"):

        class AnotherStockConflict(DomainError):
            code = "stock_conflict"

    assert declared_errors()["stock_conflict"] is StockConflict
