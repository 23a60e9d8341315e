"""OpenAPI descriptions of the payments endpoints (webhook, payment page, Midtrans notification); applied to the
views in payments/api.py."""

from decimal import Decimal

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from skincare import validation
from skincare.openapi import BUSY, INTERNAL, error

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
    summary="Where payment_url leads with PAYMENT_GATEWAY=midtrans or xendit (a browser link, signed)",
    description=(
        "Redirects to the order's gateway page (Midtrans's Snap page, Xendit's invoice), created on the first visit "
        "and reused afterwards. The page closes the gateway's expiry margin (MIDTRANS_EXPIRY_MARGIN_SECONDS, "
        "XENDIT_EXPIRY_MARGIN_SECONDS) before the order's payment_expires_at. A 503 (a wait) comes to a browser "
        "(`Accept: text/html`) as a page that asks again by itself (at its turn, `turn_in_ms`, where scripts run; "
        "else after `Retry-After`), to an API client as JSON."
    ),
    auth=[],
    responses={
        302: OpenApiResponse(description="To the gateway's page (`Location`)."),
        404: error(
            "The link is forged, altered or expired, or the order does not exist.", "not_found", "order_not_found"
        ),
        409: error(
            "The order is no longer pending, too little of its payment window is left, or its total has a fraction "
            "the gateway cannot charge (whole rupiah only).",
            "order_not_pending",
            "payment_window_closing",
            "amount_not_chargeable",
        ),
        500: INTERNAL,
        503: error(
            "The gateway did not answer in time, or this page's turn at the gateway's pace "
            "(PAYMENT_SESSIONS_PER_SECOND) has not come (the reservation still holds); retry at the turn "
            "(`turn_in_ms`) or after `Retry-After`.",
            "gateway_unavailable",
            "payment_pages_paced",
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

XENDIT_NOTIFICATION = extend_schema(
    operation_id="xendit_notification",
    summary="Xendit invoice callback",
    description=(
        "Verified by `x-callback-token` (compared in constant time with XENDIT_CALLBACK_TOKEN), then confirmed by "
        "asking Xendit for the invoices of the callback's `external_id` and applied once per invoice status to the "
        "order that id belongs to (only an id this shop issued; the callback's own status, amount and invoice id are "
        "not trusted). A replay, with the same `webhook-id` or a new one, changes nothing. Money for an id the shop "
        "did not issue pays no order: it is recorded for ops and answered `unmatched` with `order_id` null."
    ),
    auth=[],
    request=OpenApiTypes.OBJECT,
    parameters=[
        OpenApiParameter("x-callback-token", str, OpenApiParameter.HEADER, required=True),
        OpenApiParameter("webhook-id", str, OpenApiParameter.HEADER, required=False),
    ],
    responses={
        200: OpenApiResponse(
            OpenApiTypes.OBJECT, description="Applied, a replay (`duplicate`), `unmatched`, or `ignored`."
        ),
        400: error("The body is not JSON or its external_id is not an id this shop issues.", "invalid_request"),
        401: error("The x-callback-token is missing or wrong; nothing changed.", "invalid_signature"),
        404: error("The callback names an order that does not exist.", "order_not_found"),
        413: error("The body is larger than REQUEST_MAX_BODY_BYTES.", "payload_too_large"),
        500: INTERNAL,
        503: error("Xendit did not confirm it; Xendit retries.", "gateway_unavailable", "busy"),
    },
    tags=["payments"],
)
