"""The payments endpoints: the signed webhook, the payment page a buyer follows to the gateway, and the gateways'
notifications (Midtrans, Xendit). Thin: verify, parse, call a service, render."""

import logging
import re
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from rest_framework.permissions import AllowAny

from payments import schemas, services, sessions, signing
from payments.exceptions import GatewayUnavailable, PaymentPagesPaced
from skincare import metrics, validation
from skincare.api import ApiRequest, ApiResponse
from skincare.apiview import ApiView
from skincare.errors import InvalidInput
from skincare.metrics import OutcomeCountingMixin

logger = logging.getLogger(__name__)


# A payment event's currency (in either case) and its other limits: payments.schemas, which the document states.
CURRENCY_CODE = re.compile(schemas.CURRENCY_CODE_PATTERN)
EVENT_ID = re.compile(schemas.EVENT_ID_PATTERN)
AMOUNT = re.compile(schemas.AMOUNT_PATTERN)
MAX_AMOUNT = schemas.WEBHOOK_MAX_AMOUNT


def _postgres_can_store(text: str) -> bool:
    """PostgreSQL text and jsonb hold neither U+0000 nor lone surrogates (which cannot be encoded as UTF-8)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _all_postgres_can_store(data: Any) -> bool:
    """Every key and string anywhere in the parsed JSON body is storable (the raw payload is kept as jsonb)."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not _postgres_can_store(value):
                return False
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return True


def parse_webhook(data: Any) -> dict[str, Any]:
    validation.require_object(data)
    errors: dict[str, list[str]] = {}
    event_id = data.get("event_id")
    if (
        not isinstance(event_id, str)
        or not EVENT_ID.fullmatch(event_id)
        or len(event_id) > schemas.WEBHOOK_TEXT_MAX_LENGTH
        or not _postgres_can_store(event_id)
    ):
        errors["event_id"] = ["A non-empty string of at most 200 characters."]
    if data.get("type") not in services.EVENT_TYPES:
        errors["type"] = [f"One of {', '.join(services.EVENT_TYPES)}."]
    order_id = data.get("order_id")
    if not validation.is_positive_bigint(order_id):
        errors["order_id"] = ["A positive integer."]
    amount = data.get("amount")
    parsed_amount = Decimal(amount) if isinstance(amount, str) and AMOUNT.fullmatch(amount) else None
    if parsed_amount is None or parsed_amount > MAX_AMOUNT:
        errors["amount"] = ['A decimal string such as "123.00".']
    currency = data.get("currency")
    if not isinstance(currency, str) or not CURRENCY_CODE.fullmatch(currency):
        errors["currency"] = ['An ISO 4217 code such as "IDR" (required on every event).']
    reference = data.get("provider_reference", "")
    if (
        not isinstance(reference, str)
        or len(reference) > schemas.WEBHOOK_TEXT_MAX_LENGTH
        or not _postgres_can_store(reference)
    ):
        errors["provider_reference"] = ["A string of at most 200 characters."]
    if not errors and not _all_postgres_can_store(data):
        errors["body"] = ["Strings must not contain U+0000 or unpaired surrogates."]
    if errors:
        raise InvalidInput("The webhook body is invalid.", fields=errors)
    return {
        "event_id": event_id,
        "event_type": data["type"],
        "order_id": order_id,
        "amount": parsed_amount,
        "currency": currency.upper(),
        "provider_reference": reference,
    }


class PaymentWebhookApi(OutcomeCountingMixin, ApiView):
    """Signed gateway callback. The signature is checked on the raw body before anything is parsed."""

    outcome_counter = metrics.PAYMENT_WEBHOOK_EVENTS
    allowed_outcomes = metrics.WEBHOOK_OUTCOMES
    success_outcome_field = "status"

    authentication_classes = []
    permission_classes = [AllowAny]

    @schemas.WEBHOOK
    def post(self, request: ApiRequest) -> ApiResponse:
        body = request.body
        signing.verify(
            header=request.headers.get("X-Signature"),
            body=body,
            secret=settings.PAYMENT_WEBHOOK_SECRET,
            tolerance_seconds=settings.PAYMENT_WEBHOOK_TOLERANCE_SECONDS,
        )
        event = parse_webhook(request.data)
        outcome = services.payment_event_apply(payload=request.data, **event)
        return ApiResponse({"status": outcome, "event_id": event["event_id"]})


class PaymentPageApi(OutcomeCountingMixin, ApiView):
    """``payment_url`` with a gateway: the buyer's browser follows the signed link here and is sent on to the order's
    page at the gateway, created on the first visit (``payments.sessions.payment_session_open``). Every answer is
    counted (``skincare_payment_pages_total{outcome}``): ``redirected`` or the error's code."""

    outcome_counter = metrics.PAYMENT_PAGES
    allowed_outcomes = metrics.PAYMENT_PAGE_OUTCOMES

    def outcome(self, response: Any) -> object:
        if response.status_code == 302:
            return "redirected"
        return getattr(response, "error_code", None) or super().outcome(response)

    authentication_classes = []
    permission_classes = [AllowAny]

    @schemas.PAYMENT_PAGE
    def get(self, request: ApiRequest, token: str) -> HttpResponse:
        link = sessions.link_claims(token)
        try:
            return HttpResponseRedirect(sessions.payment_session_open(link=link))
        except (PaymentPagesPaced, GatewayUnavailable) as exc:  # a wait: the reservation holds
            if "text/html" not in request.META.get("HTTP_ACCEPT", ""):
                raise  # an API client: the JSON error with Retry-After
            return page_that_waits(request.http, exc)


def page_that_waits(request: HttpRequest, exc: PaymentPagesPaced | GatewayUnavailable) -> HttpResponse:
    """For a browser (it asked for HTML): the same 503 and ``Retry-After`` as a page that asks again by itself
    when the wait is over (``<meta http-equiv="refresh">``; at its turn to the millisecond where scripts run), so the
    buyer is sent on once the page is ready."""
    wait = exc.retry_after or 1
    context = {
        "retry_after": wait,
        "turn_in_ms": exc.turn_in_ms if isinstance(exc, PaymentPagesPaced) else None,
        "message": exc.message,
    }
    response = render(request, "payments/page_waits.html", context, status=503)
    response["Retry-After"] = str(wait)
    response.error_code = exc.code  # type: ignore[attr-defined]  # counted like the JSON answer
    return response


class MidtransNotificationApi(OutcomeCountingMixin, ApiView):
    """Midtrans's HTTP notification: verified by its ``signature_key`` and confirmed with the status API before
    anything changes (``payments.sessions.notification_apply``). Counted with the webhook's events."""

    outcome_counter = metrics.PAYMENT_WEBHOOK_EVENTS
    allowed_outcomes = metrics.WEBHOOK_OUTCOMES
    success_outcome_field = "status"

    authentication_classes = []
    permission_classes = [AllowAny]

    @schemas.MIDTRANS_NOTIFICATION
    def post(self, request: ApiRequest) -> ApiResponse:
        order_id, outcome = sessions.notification_apply(
            gateway_name="midtrans", body=request.body, headers=request.headers
        )
        return ApiResponse({"status": outcome, "order_id": order_id})


class XenditNotificationApi(OutcomeCountingMixin, ApiView):
    """Xendit's invoice callback: verified by its ``x-callback-token`` and confirmed by asking Xendit before anything
    changes (``payments.sessions.notification_apply``). Counted with the webhook's events."""

    outcome_counter = metrics.PAYMENT_WEBHOOK_EVENTS
    allowed_outcomes = metrics.WEBHOOK_OUTCOMES
    success_outcome_field = "status"

    authentication_classes = []
    permission_classes = [AllowAny]

    @schemas.XENDIT_NOTIFICATION
    def post(self, request: ApiRequest) -> ApiResponse:
        order_id, outcome = sessions.notification_apply(
            gateway_name="xendit", body=request.body, headers=request.headers
        )
        return ApiResponse({"status": outcome, "order_id": order_id})
