"""OpenAPI descriptions of the checkout and order endpoints; applied to the views in checkout/api.py."""

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from carts.schemas import CART_ID, NOT_FOUND, CheckoutRequestSerializer
from skincare import validation
from skincare.openapi import BUSY, INTERNAL, UNAUTHORIZED, UNAVAILABLE, error


class OrderLineSerializer(serializers.Serializer):
    product_id = serializers.IntegerField()
    qty = serializers.IntegerField()
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=2, coerce_to_string=True)


class OrderSerializer(serializers.Serializer):
    order_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["pending_payment", "paid", "cancelled"])
    cancel_reason = serializers.ChoiceField(
        choices=["payment_timeout", "customer_cancelled", "ops_cancelled"], allow_null=True, allow_blank=True
    )
    payment_expires_at = serializers.DateTimeField(help_text="Deadline by the database clock (UTC).")
    total = serializers.DecimalField(max_digits=12, decimal_places=2, coerce_to_string=True)
    currency = serializers.CharField(
        help_text="ISO 4217 code of the shop's currency (SHOP_CURRENCY); the amount a "
        "payment event must match is `total` in this currency."
    )
    items = OrderLineSerializer(many=True)
    payment_url = serializers.URLField(allow_null=True, help_text="Where to pay (the sandbox page in development).")


NOT_YOURS = error("No such order, or not yours (the two look the same).", "order_not_found")

ORDER_DETAIL = extend_schema(
    operation_id="order_detail",
    summary="One of your orders",
    responses={200: OrderSerializer, 401: UNAUTHORIZED, 404: NOT_YOURS, 500: INTERNAL, 503: UNAVAILABLE},
    tags=["orders"],
)

ORDER_CANCEL = extend_schema(
    operation_id="order_cancel",
    summary="Cancel your pending order and release its stock",
    request=None,
    responses={
        200: OpenApiResponse(OrderSerializer, description="Cancelled (customer_cancelled); units returned."),
        401: UNAUTHORIZED,
        404: NOT_YOURS,
        409: error("The order is already paid or cancelled.", "order_not_pending"),
        500: INTERNAL,
        503: BUSY,
    },
    tags=["orders"],
)


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {
        "type": "string",
        "minLength": 1,
        "maxLength": validation.IDEMPOTENCY_KEY_MAX_LENGTH,
        "pattern": validation.IDEMPOTENCY_KEY_PATTERN,
    },
    OpenApiParameter.HEADER,
    required=False,
    description=(
        "1-255 printable ASCII characters, scoped to the customer. The same key with the same body replays "
        "the first answer (201 or a domain 4xx) with `Idempotent-Replayed: true`; a duplicate sent while the "
        "first is still running waits for it; the same key with a different body is a 422. Kept "
        "IDEMPOTENCY_KEY_TTL_SECONDS (default 86400)."
    ),
)

# The answers of a checkout; the cart checkout (CART_CHECKOUT) gives the same ones and its own.
CHECKOUT_RESPONSES = {
    201: OpenApiResponse(OrderSerializer, description="Order created, stock reserved."),
    400: error(
        "The body is not valid JSON or not a valid cart, or the Idempotency-Key is malformed.",
        "invalid_request",
        "malformed_json",
    ),
    401: UNAUTHORIZED,
    409: error(
        "Not enough stock (`product_ids` names every short product; an optimistic product that kept losing its "
        "version check adds `gave_up_after`); a `row_lock_nowait` product's row is busy (`lock_busy`, with "
        "Retry-After); the customer's `max_per_customer` or pending-order cap would be exceeded; a duplicate "
        "Idempotency-Key without a stored answer (safety net, with Retry-After); a product's sale window has not "
        "opened yet by the database clock (`sale_not_started`: `product_ids`, `starts_at`, and Retry-After = the "
        "whole seconds to the opening, at least 1; never stored under an Idempotency-Key, so the same key can buy "
        "once the sale opens); a product sells through a queue and the customer holds no admission "
        "(`admission_required`: `product_ids`, `queue_urls`, `pass_states`, Retry-After; never stored under an "
        "Idempotency-Key; docs/queue.md).",
        "stock_conflict",
        "lock_busy",
        "purchase_limit_exceeded",
        "too_many_pending_orders",
        "idempotency_key_in_progress",
        "sale_not_started",
        "admission_required",
    ),
    410: error(
        "A product's sale window has closed by the database clock (`product_ids` names them), or the customer's "
        "admission to a queued product lapsed unused (`admission_expired`); nothing written.",
        "sale_ended",
        "admission_expired",
    ),
    413: error("The body is larger than REQUEST_MAX_BODY_BYTES.", "payload_too_large"),
    415: error("The body is not `application/json`.", "unsupported_media_type"),
    422: error(
        "A product does not exist or is not for sale (`product_ids` lists them), or the Idempotency-Key was used "
        "with a different body.",
        "invalid_product",
        "idempotency_key_reused",
    ),
    429: error(
        "More than CHECKOUT_RATE_LIMIT checkouts in the current window; retry after Retry-After.", "rate_limited"
    ),
    500: INTERNAL,
    503: BUSY,
}

CHECKOUT = extend_schema(
    operation_id="checkout",
    summary="Reserve stock and open a pending order",
    description=(
        "One short transaction: the order, its lines and reservations are written and the stock is reserved "
        "with a guarded update. The order must be paid before `payment_expires_at`, or the sweeper returns the units."
    ),
    parameters=[IDEMPOTENCY_KEY],
    request=CheckoutRequestSerializer,
    responses=CHECKOUT_RESPONSES,
    tags=["checkout"],
)

CART_CHECKOUT = extend_schema(
    operation_id="cart_checkout",
    summary="Check out your cart: reserve its stock and open a pending order, at most once",
    description=(
        "No body. The same answers as `POST /v1/checkout` (same 201 body, same refusals), plus the cart's own: a "
        "cart becomes an order at most once, however many checkouts of it race."
    ),
    parameters=[CART_ID, IDEMPOTENCY_KEY],
    request=None,
    responses={
        **CHECKOUT_RESPONSES,
        400: error("The Idempotency-Key is malformed.", "invalid_request"),
        404: NOT_FOUND,
        409: error(
            "The cart was already checked out (`cart_checked_out`, with `order_id`), or any 409 of /v1/checkout: "
            "not enough stock (refresh your cart), `lock_busy`, a per-customer limit, a key in progress, a product's "
            "sale window not open yet (`sale_not_started`, with Retry-After; the cart stays open), no admission to a "
            "queued product (`admission_required`; the cart stays open).",
            "cart_checked_out",
            "stock_conflict",
            "lock_busy",
            "purchase_limit_exceeded",
            "too_many_pending_orders",
            "idempotency_key_in_progress",
            "sale_not_started",
            "admission_required",
        ),
        410: error(
            "The cart was not changed for CART_TTL_SECONDS (`cart_expired`: rebuild it), a product's sale window "
            "has closed (`sale_ended`), or the admission to a queued product lapsed (`admission_expired`). Nothing "
            "was changed.",
            "cart_expired",
            "sale_ended",
            "admission_expired",
        ),
    },
    tags=["carts"],
)
