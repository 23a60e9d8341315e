"""OpenAPI descriptions of the payments endpoints (checkout, webhook); applied to the views in payments/api.py."""

from decimal import Decimal

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from orders.schemas import OrderSerializer
from skincare import validation
from skincare.openapi import BUSY, INTERNAL, UNAUTHORIZED, error

# The webhook's limits, enforced by payments.api.parse_webhook with these same patterns and stated by the document
# below. No U+0000 anywhere: PostgreSQL text cannot hold it.
WEBHOOK_TEXT_MAX_LENGTH = 200  # event_id, provider_reference
# An event id: at least one character other than ASCII whitespace.
EVENT_ID_PATTERN = r"^[^\u0000]*[^\u0000\t\n\u000b\u000c\r ][^\u0000]*$"
CURRENCY_CODE_PATTERN = "^[A-Za-z]{3}$"  # ISO 4217, either case
# payment_attempts.received_amount is NUMERIC(12, 2): a larger figure could never be recorded.
WEBHOOK_MAX_AMOUNT = Decimal("9999999999.99")
# A decimal string of 0 to WEBHOOK_MAX_AMOUNT with at most two decimals (no sign, no exponent, no spaces).
AMOUNT_PATTERN = r"^[0-9]{1,10}(\.[0-9]{1,2})?$"


class CheckoutItemSerializer(serializers.Serializer):
    product_id = serializers.IntegerField(min_value=1, max_value=validation.BIGINT_MAX)
    qty = serializers.IntegerField(
        min_value=1,
        max_value=settings.CHECKOUT_MAX_QTY,
        help_text="At most CHECKOUT_MAX_QTY units of one product per order (the lines of one product added up).",
    )


class CheckoutRequestSerializer(serializers.Serializer):
    items = serializers.ListField(
        child=CheckoutItemSerializer(),
        min_length=1,
        max_length=settings.CHECKOUT_MAX_ITEMS,
        help_text="1 to CHECKOUT_MAX_ITEMS lines.",
    )


class WebhookEventSerializer(serializers.Serializer):
    event_id = serializers.RegexField(
        EVENT_ID_PATTERN,
        max_length=WEBHOOK_TEXT_MAX_LENGTH,
        help_text="Each event id takes effect exactly once (not only whitespace).",
    )
    type = serializers.ChoiceField(choices=["payment.succeeded", "payment.failed"])
    order_id = serializers.IntegerField(min_value=1, max_value=validation.BIGINT_MAX)
    amount = serializers.RegexField(AMOUNT_PATTERN, help_text=f"A decimal string, at most {WEBHOOK_MAX_AMOUNT}.")
    currency = serializers.RegexField(
        CURRENCY_CODE_PATTERN,
        help_text="ISO 4217 code, either case; any other than the order's is a `currency_mismatch`.",
    )
    # The gateway's own reference, empty when it has none (so no pattern: DRF's blank choice beside a pattern is a
    # oneOf that "" matches twice). U+0000 is refused in every string of the body, as the operation's description says.
    provider_reference = serializers.CharField(max_length=WEBHOOK_TEXT_MAX_LENGTH, required=False, allow_blank=True)


class WebhookResultSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=[
            "paid",
            "duplicate",
            "failed",
            "amount_mismatch",
            "currency_mismatch",
            "refund_required",
            "already_paid",
        ],
        help_text="What the event did: `duplicate` for a replay (nothing changed).",
    )
    event_id = serializers.CharField()


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

# The answers of a checkout; the cart checkout (carts/schemas.py) gives the same ones and its own.
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

WEBHOOK = extend_schema(
    operation_id="payment_webhook",
    summary="Payment gateway callback (signed)",
    description=(
        '`X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" with PAYMENT_WEBHOOK_SECRET>`. '
        "Applied exactly once per `event_id` in the same transaction as its effect. No string in the body may hold "
        "U+0000 (400)."
    ),
    auth=[],
    parameters=[
        OpenApiParameter(
            "X-Signature", str, OpenApiParameter.HEADER, required=True, description="t=<unix seconds>,v1=<hex HMAC>"
        )
    ],
    request=WebhookEventSerializer,
    responses={
        200: OpenApiResponse(WebhookResultSerializer, description="Applied, or recognised as a replay."),
        400: error(
            "The body is not valid JSON or not a valid event (`fields` says why).", "invalid_request", "malformed_json"
        ),
        401: error("Signature missing, wrong, or timestamp outside the window; nothing changed.", "invalid_signature"),
        404: error("The event names an order that does not exist.", "order_not_found"),
        413: error("The body is larger than REQUEST_MAX_BODY_BYTES.", "payload_too_large"),
        415: error("The body is not `application/json`.", "unsupported_media_type"),
        500: INTERNAL,
        503: BUSY,
    },
    tags=["payments"],
)

PAYMENT_PAGE = extend_schema(
    operation_id="payment_page",
    summary="Where payment_url leads with PAYMENT_GATEWAY=midtrans (a browser link, signed)",
    description=(
        "Redirects to the order's Midtrans Snap page, created on the first visit and reused afterwards. The page "
        "closes MIDTRANS_EXPIRY_MARGIN_SECONDS before the order's payment_expires_at."
    ),
    auth=[],
    responses={
        302: OpenApiResponse(description="To the Snap page (`Location`)."),
        404: error(
            "The link is forged, altered or expired, or the order does not exist.", "not_found", "order_not_found"
        ),
        409: error(
            "The order is no longer pending, too little of its payment window is left, or its total has a fraction "
            "Midtrans cannot charge (whole rupiah only).",
            "order_not_pending",
            "payment_window_closing",
            "amount_not_chargeable",
        ),
        500: INTERNAL,
        503: error(
            "Midtrans did not answer in time (the reservation still holds); retry after `Retry-After`.",
            "gateway_unavailable",
            "busy",
        ),
    },
    tags=["payments"],
)

MIDTRANS_NOTIFICATION = extend_schema(
    operation_id="midtrans_notification",
    summary="Midtrans HTTP notification",
    description=(
        "Verified by `signature_key` (SHA-512 of order_id + status_code + gross_amount + MIDTRANS_SERVER_KEY), then "
        "confirmed with Midtrans's status API and applied once per transaction status to the order whose transaction "
        "id it names (only an id this shop issued). Money for an id the shop did not issue pays no order: it is "
        "recorded for ops and answered `unmatched` with `order_id` null."
    ),
    auth=[],
    request=OpenApiTypes.OBJECT,
    responses={
        200: OpenApiResponse(
            OpenApiTypes.OBJECT, description="Applied, a replay (`duplicate`), `unmatched`, or `ignored`."
        ),
        400: error("order_id is not a Midtrans order id (at most 50 ASCII characters).", "invalid_request"),
        401: error("The signature_key does not verify; nothing changed.", "invalid_signature"),
        404: error("The notification names an order that does not exist.", "order_not_found"),
        413: error("The body is larger than REQUEST_MAX_BODY_BYTES.", "payload_too_large"),
        500: INTERNAL,
        503: error("The status API did not confirm it; Midtrans retries.", "gateway_unavailable", "busy"),
    },
    tags=["payments"],
)
