import hashlib
import json
import logging
import re
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpResponseRedirect
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from orders.selectors import OrderView
from payments import checkout, idempotency, ratelimit, schemas, services, sessions, signing
from payments.idempotency import KeyedCheckout
from payments.order_api import order_data
from skincare import metrics, validation
from skincare.api import authenticated_customer
from skincare.apiview import ApiView
from skincare.errors import InvalidInput
from skincare.metrics import OutcomeCountingMixin

logger = logging.getLogger(__name__)


IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"


def idempotency_key(request: Request) -> str | None:
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


def checkout_customer(request: Request) -> User:
    """The customer placing a checkout (either checkout view, once it has parsed its request), with this checkout
    counted against the rate limit (``payments.ratelimit``: 429 over it)."""
    customer = authenticated_customer(request)
    ratelimit.checkout_rate_limit(customer=customer)
    return customer


def order_created(request: Request, order: OrderView) -> Response:
    """201 with the order placed (``payments.order_api.order_data``)."""
    return Response(order_data(request, order), status=201)


def keyed_checkout_response(request: Request, answer: KeyedCheckout) -> Response:
    """The answer of a checkout under an ``Idempotency-Key``: 201 with the order, or a stored refusal as it was
    stored; ``Idempotent-Replayed: true`` on a replay."""
    headers = {"Idempotent-Replayed": "true"} if answer.replayed else None
    if answer.refusal is not None:
        return Response(answer.refusal.body, status=answer.refusal.http_status, headers=headers)
    assert answer.order is not None  # a keyed checkout answers with an order or a refusal
    return Response(order_data(request, answer.order), status=201, headers=headers)


class CheckoutEndpoint(OutcomeCountingMixin, ApiView):
    """A view that places a checkout, counted as one on ``/metrics`` (both checkout views)."""

    outcome_counter = metrics.CHECKOUT_REQUESTS
    allowed_outcomes = metrics.CHECKOUT_OUTCOMES
    latency_histogram = metrics.CHECKOUT_LATENCY
    success_outcome = "created"


class CheckoutApi(CheckoutEndpoint):
    """``POST /v1/checkout``."""

    @schemas.CHECKOUT
    def post(self, request: Request) -> Response:
        key = idempotency_key(request)
        items = validation.checkout_items(request.data, max_items=settings.CHECKOUT_MAX_ITEMS)
        if key is None:
            # Too many units and the sold-out memory before the rate limit: a refusal that takes nothing and asks
            # the database nothing is not counted (payments.checkout, the order of the checks).
            quantities = checkout.checkout_quantities(items)
            customer = checkout_customer(request)
            return order_created(request, checkout.checkout(customer=customer, items=quantities.items()))
        customer = checkout_customer(request)
        answer = idempotency.checkout_idempotent(
            customer=customer, items=items, key=key, fingerprint=request_fingerprint(request.data)
        )
        return keyed_checkout_response(request, answer)


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
    def post(self, request: Request) -> Response:
        body = request.body
        signing.verify(
            header=request.headers.get("X-Signature"),
            body=body,
            secret=settings.PAYMENT_WEBHOOK_SECRET,
            tolerance_seconds=settings.PAYMENT_WEBHOOK_TOLERANCE_SECONDS,
        )
        event = parse_webhook(request.data)
        outcome = services.payment_event_apply(payload=request.data, **event)
        return Response({"status": outcome, "event_id": event["event_id"]})


class PaymentPageApi(ApiView):
    """``payment_url`` with Midtrans: the buyer's browser follows the signed link here and is sent on to the order's
    Snap page, created on the first visit (``payments.sessions.payment_session_open``)."""

    authentication_classes = []
    permission_classes = [AllowAny]

    @schemas.PAYMENT_PAGE
    def get(self, request: Request, token: str) -> HttpResponseRedirect:
        order_id, customer_id = sessions.link_claims(token)
        return HttpResponseRedirect(sessions.payment_session_open(order_id=order_id, customer_id=customer_id))


class MidtransNotificationApi(OutcomeCountingMixin, ApiView):
    """Midtrans's HTTP notification: verified by its ``signature_key`` and confirmed with the status API before
    anything changes (``payments.sessions.notification_apply``). Counted with the webhook's events."""

    outcome_counter = metrics.PAYMENT_WEBHOOK_EVENTS
    allowed_outcomes = metrics.WEBHOOK_OUTCOMES
    success_outcome_field = "status"

    authentication_classes = []
    permission_classes = [AllowAny]

    @schemas.MIDTRANS_NOTIFICATION
    def post(self, request: Request) -> Response:
        order_id, outcome = sessions.notification_apply(body=request.body)
        return Response({"status": outcome, "order_id": order_id})
