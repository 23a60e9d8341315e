"""The checkout and order endpoints: placing an order (from items or a cart), reading one, cancelling it. Thin: parse
the request, call ``checkout.services.checkout_place`` or an order selector or service, render. An order's JSON
carries the link its customer pays at (``payments.sessions.payment_url``), so the order endpoints live here, above
payments, with the checkout whose 201 renders the same JSON."""

import hashlib
import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from carts.api import parse_cart_id
from checkout import schemas
from checkout.idempotency import Placed
from checkout.services import checkout_place
from orders import selectors, services
from orders.exceptions import OrderNotFound
from orders.selectors import OrderView
from payments import sessions
from payments.sessions import payment_url
from skincare import metrics, validation
from skincare.api import ApiRequest, ApiResponse, authenticated_customer
from skincare.apiview import ApiView
from skincare.errors import InvalidInput
from skincare.metrics import OutcomeCountingMixin

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"


def idempotency_key(request: ApiRequest) -> str | None:
    """The ``Idempotency-Key`` header: absent → None; else 1 to 255 printable ASCII characters, or 400."""
    key = request.headers.get(IDEMPOTENCY_KEY_HEADER)
    if key is None:
        return None
    if not validation.is_idempotency_key(key):
        raise InvalidInput(
            "Idempotency-Key must be 1 to 255 printable ASCII characters.",
            fields={IDEMPOTENCY_KEY_HEADER: ["1 to 255 printable ASCII characters."]},
        )
    return key


def request_fingerprint(data: Any) -> str:
    """SHA-256 of the body's canonical JSON: the same JSON document gives the same fingerprint however it is spaced
    or its keys are ordered."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def order_data(request: HttpRequest, order: OrderView) -> dict[str, Any]:
    """An order as every endpoint shows it (checkout's 201, a replayed 201, GET, cancel): its JSON and where to
    pay it."""
    return {**order.to_json(), "payment_url": payment_url(request, order)}


def placed_response(request: ApiRequest, placed: Placed) -> ApiResponse:
    """The answer of a checkout: 201 with the order, or a stored refusal as it was stored;
    ``Idempotent-Replayed: true`` on a replay of a key's answer."""
    headers = {"Idempotent-Replayed": "true"} if placed.replayed else None
    if placed.refusal is not None:
        return ApiResponse(placed.refusal.body, status=placed.refusal.http_status, headers=headers)
    assert placed.order is not None  # a checkout answers with an order or a refusal
    return ApiResponse(order_data(request.http, placed.order), status=201, headers=headers)


class CheckoutEndpoint(OutcomeCountingMixin, ApiView):
    """A view that places a checkout, counted as one on ``/metrics`` (both checkout views)."""

    outcome_counter = metrics.CHECKOUT_REQUESTS
    allowed_outcomes = metrics.CHECKOUT_OUTCOMES
    latency_histogram = metrics.CHECKOUT_LATENCY
    success_outcome = "created"


class CheckoutApi(CheckoutEndpoint):
    """``POST /v1/checkout``."""

    @schemas.CHECKOUT
    def post(self, request: ApiRequest) -> ApiResponse:
        key = idempotency_key(request)
        items = validation.checkout_items(request.data, max_items=settings.CHECKOUT_MAX_ITEMS)
        quantities = validation.merge_quantities(items, max_qty=settings.CHECKOUT_MAX_QTY)
        placed = checkout_place(
            customer=authenticated_customer(request),
            quantities=quantities,
            key=key,
            fingerprint="" if key is None else request_fingerprint(request.data),
        )
        return placed_response(request, placed)


class CartCheckoutApi(CheckoutEndpoint):
    """``POST /v1/carts/<id>/checkout``: answered like ``POST /v1/checkout``, the cart's items standing in for the
    body."""

    @schemas.CART_CHECKOUT
    def post(self, request: ApiRequest, cart_id: str) -> ApiResponse:
        parsed = parse_cart_id(cart_id)
        key = idempotency_key(request)
        # No body: the key's fingerprint names the cart, so one key cannot replay another cart's answer.
        placed = checkout_place(
            customer=authenticated_customer(request),
            cart_id=parsed,
            key=key,
            fingerprint="" if key is None else request_fingerprint({"cart_id": str(parsed)}),
        )
        return placed_response(request, placed)


class OrderDetailApi(ApiView):
    @schemas.ORDER_DETAIL
    def get(self, request: ApiRequest, order_id: int) -> ApiResponse:
        order = selectors.order_get_for_customer(order_id=order_id, customer=authenticated_customer(request))
        if order is None:
            raise OrderNotFound(order_id=order_id)
        return ApiResponse(order_data(request.http, order))


class OrderCancelApi(ApiView):
    @schemas.ORDER_CANCEL
    def post(self, request: ApiRequest, order_id: int) -> ApiResponse:
        customer = authenticated_customer(request)
        services.order_cancel(order_id=order_id, customer=customer)
        sessions.session_close_after_cancel(order_id=order_id)  # committed: now the gateway, outside any transaction
        order = selectors.order_get_for_customer(order_id=order_id, customer=customer)
        if order is None:  # cancelled a moment ago, so only a concurrent deletion could get here
            raise OrderNotFound(order_id=order_id)
        return ApiResponse(order_data(request.http, order))
