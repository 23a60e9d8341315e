"""The OpenAPI document states every limit the request validation enforces, built from the same constants, and the
validation agrees with each limit at its edge (the last value in, the first value out)."""

import re
from decimal import Decimal

import pytest
from django.conf import settings

from payments import api, schemas
from skincare import validation

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def document(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    from django.test import Client

    with django_db_blocker.unblock():
        return Client().get("/v1/schema").json()


def component(document, name):  # type: ignore[no-untyped-def]
    return document["components"]["schemas"][name]


def header(document, method, path, name):  # type: ignore[no-untyped-def]
    [found] = [p for p in document["paths"][path][method]["parameters"] if p["in"] == "header" and p["name"] == name]
    return found["schema"]


def test_the_cart_limits_are_stated(document) -> None:  # type: ignore[no-untyped-def]
    items = component(document, "CheckoutRequestRequest")["properties"]["items"]
    assert (items["minItems"], items["maxItems"]) == (1, settings.CHECKOUT_MAX_ITEMS)
    line = component(document, "CheckoutItemRequest")["properties"]
    assert (line["product_id"]["minimum"], line["product_id"]["maximum"]) == (1, validation.BIGINT_MAX)
    assert (line["qty"]["minimum"], line["qty"]["maximum"]) == (1, settings.CHECKOUT_MAX_QTY)
    for method, path in [("post", "/v1/checkout"), ("post", "/v1/carts/{cart_id}/checkout")]:
        key = header(document, method, path, "Idempotency-Key")
        assert (key["minLength"], key["maxLength"]) == (1, validation.IDEMPOTENCY_KEY_MAX_LENGTH)
        assert key["pattern"] == validation.IDEMPOTENCY_KEY_PATTERN


def test_the_webhook_limits_are_stated(document) -> None:  # type: ignore[no-untyped-def]
    event = component(document, "WebhookEventRequest")["properties"]
    assert (event["event_id"]["maxLength"], event["event_id"]["pattern"]) == (
        schemas.WEBHOOK_TEXT_MAX_LENGTH,
        schemas.EVENT_ID_PATTERN,
    )
    assert event["provider_reference"]["maxLength"] == schemas.WEBHOOK_TEXT_MAX_LENGTH
    assert event["provider_reference"]["pattern"] == schemas.PROVIDER_REFERENCE_PATTERN
    assert event["order_id"]["maximum"] == validation.BIGINT_MAX
    assert event["amount"]["pattern"] == schemas.AMOUNT_PATTERN
    assert event["currency"]["pattern"] == schemas.CURRENCY_CODE_PATTERN


def test_the_checkout_validation_agrees_with_each_stated_limit_at_its_edge() -> None:
    top, cap = settings.CHECKOUT_MAX_ITEMS, settings.CHECKOUT_MAX_QTY
    lines = [{"product_id": validation.BIGINT_MAX - i, "qty": cap} for i in range(top)]
    assert len(validation.checkout_items({"items": lines}, max_items=top)) == top
    for refused in ([], [*lines, {"product_id": 1, "qty": 1}], [{"product_id": validation.BIGINT_MAX + 1, "qty": 1}]):
        with pytest.raises(validation.InvalidInput):
            validation.checkout_items({"items": refused}, max_items=top)
    key = re.compile(validation.IDEMPOTENCY_KEY_PATTERN)
    for value in ["k", " ~", "~" * validation.IDEMPOTENCY_KEY_MAX_LENGTH, "", "k" * 256, "é", "\x7f", "a\tb"]:
        assert validation.is_idempotency_key(value) == bool(key.fullmatch(value)), repr(value)


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("amount", ["0", "129000", "129000.5", "9999999999.99", "10000000000", "1e2", " 1", "-1", "1.001", "1_0"]),
        ("currency", ["IDR", "idr", "iDr", "ID", "IDRX", "1DR", "İDR"]),
        ("event_id", ["e", " e ", "\u00a0", " ", "\t\n", "a\x00", "x" * 200, "x" * 201]),
        ("provider_reference", ["", "ch_1", "x" * 200, "x" * 201, "a\x00"]),
    ],
)
def test_the_webhook_validation_agrees_with_each_stated_pattern(field, values) -> None:  # type: ignore[no-untyped-def]
    stated = {
        "amount": (schemas.AMOUNT_PATTERN, None),
        "currency": (schemas.CURRENCY_CODE_PATTERN, None),
        "event_id": (schemas.EVENT_ID_PATTERN, schemas.WEBHOOK_TEXT_MAX_LENGTH),
        "provider_reference": (schemas.PROVIDER_REFERENCE_PATTERN, schemas.WEBHOOK_TEXT_MAX_LENGTH),
    }
    pattern, max_length = stated[field]
    event = {"event_id": "e", "type": "payment.succeeded", "order_id": 1, "amount": "1.00", "currency": "IDR"}
    for value in values:
        in_document = bool(re.fullmatch(pattern, value)) and (max_length is None or len(value) <= max_length)
        if field == "amount" and in_document:
            in_document = Decimal(value) <= schemas.WEBHOOK_MAX_AMOUNT
        try:
            api.parse_webhook({**event, field: value})
            accepted = True
        except validation.InvalidInput:
            accepted = False
        assert accepted == in_document, (field, value)
