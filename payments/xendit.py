"""Xendit (Invoices) behind the gateway seam (``payments.gateway``), over the standard library's HTTP client.

Why not the official ``xendit-python``: it is a generated client on ``urllib3`` whose calls take a per-socket timeout
at best, not a deadline for the whole call, and it raises one exception type for a refusal and an outage alike; the
shop needs every call answered whole within ``XENDIT_TIMEOUT_SECONDS`` (the boundary, ``payments.boundary``) and must
tell "no invoice" from "no answer" and a 429 from an outage. Four calls are shorter to keep here than a dependency,
and the fake server in ``devtools/fake_xendit.py`` tests them over real HTTP, as ``payments.midtrans`` is tested.

The wire format (Xendit's Invoice API reference): ``POST /v2/invoices`` with ``external_id``, ``amount``,
``currency``, ``invoice_duration`` (seconds) and ``description``, answered with the invoice (``id``, ``status``
``PENDING``, ``invoice_url``, ``expiry_date``); ``GET /v2/invoices?external_id=…`` lists the invoices of one
``external_id``; ``POST /invoices/{id}/expire!`` expires a pending one; the secret key is the HTTP Basic user with an
empty password. A callback carries the account's verification token in ``x-callback-token`` (compared in constant
time) and a ``webhook-id``; its body is the invoice's fields. The shop names each attempt's invoice by its own
``external_id`` (the ``gateway_order_id`` of ``payments.sessions``) and reads its state by that id, never by the
invoice id a callback names: a callback only says which ``external_id`` to ask about.
"""

import base64
import hmac
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings

from payments import gateway
from payments.boundary import boundary
from payments.exceptions import GatewayRateLimited, GatewayUnavailable, InvalidSignature
from skincare.errors import InvalidInput

# An invoice's status -> the shop's status (payments.gateway).
STATUSES = {
    "PENDING": gateway.OPEN,
    "PAID": gateway.SETTLED,
    "SETTLED": gateway.SETTLED,
    "EXPIRED": gateway.FAILED,
}
MAX_BODY_BYTES = 256 * 1024  # a list of one external_id's invoices: a handful
# Xendit's limit on an external_id (its API reference); ours are "<order id>-<8 hex>".
EXTERNAL_ID_MAX_LENGTH = 255
TOKEN_HEADER = "x-callback-token"  # noqa: S105 - a header name, not a secret
# What a 429 asks the buyer to wait when Xendit names no wait (its live limit is per second).
RATE_LIMITED_RETRY_AFTER = 1


def external_id_valid(value: Any) -> str:
    """A callback's ``external_id`` as the shop issues them (ASCII, at most 255 characters): matched against
    ``gateway_transactions`` by the caller, never read as an order id."""
    if not isinstance(value, str) or not value or not value.isascii() or len(value) > EXTERNAL_ID_MAX_LENGTH:
        raise InvalidInput(
            "external_id is not an id this shop issues.", fields={"external_id": ["At most 255 ASCII characters."]}
        )
    return value


class XenditGateway:
    name = "xendit"
    shortest_session = timedelta(minutes=1)  # the buyer needs a minute to pay, whatever the API accepts

    def __init__(self, *, secret_key: str, callback_token: str, api_base_url: str, timeout: float) -> None:
        self.secret_key = secret_key
        self.callback_token = callback_token
        self.api_base_url = api_base_url.rstrip("/")
        self.timeout = timeout

    @classmethod
    def from_settings(cls) -> "XenditGateway":
        return cls(
            secret_key=settings.XENDIT_SECRET_KEY,
            callback_token=settings.XENDIT_CALLBACK_TOKEN,
            api_base_url=settings.XENDIT_API_BASE_URL,
            timeout=settings.XENDIT_TIMEOUT_SECONDS,
        )

    @property
    def expiry_margin(self) -> timedelta:
        return timedelta(seconds=settings.XENDIT_EXPIRY_MARGIN_SECONDS)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        """One request with the secret key through this process's gateway boundary (answered whole within the
        timeout, a bulkhead, a circuit breaker): (HTTP status, JSON body). No answer, a 5xx or a body that is not
        JSON raises GatewayUnavailable; a 429 raises GatewayRateLimited (nothing was done)."""
        url = self.api_base_url + path
        return boundary().call(lambda: self._request(method, url, body), deadline=self.timeout, endpoint="invoices")

    def _request(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        """The request itself (each socket operation bounded by the timeout too, so a thread given up on ends)."""
        auth = base64.b64encode(f"{self.secret_key}:".encode()).decode()
        request = urllib.request.Request(  # noqa: S310 - the base URL is a setting (https in production)
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Basic {auth}",
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
        )
        retry_after = None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                status, raw = response.status, response.read(MAX_BODY_BYTES)
        except urllib.error.HTTPError as exc:
            status, raw, retry_after = exc.code, exc.read(MAX_BODY_BYTES), exc.headers.get("Retry-After")
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, a malformed URL
            raise GatewayUnavailable(f"Xendit did not answer: {exc}") from exc
        if status == 429:
            limited = GatewayRateLimited("Xendit refused the call for its rate limit (429).")
            limited.retry_after = _seconds(retry_after)
            limited.sent = False  # type: ignore[attr-defined]  # refused: nothing was created there
            raise limited
        if status >= 500:
            raise GatewayUnavailable(f"Xendit answered {status}.")
        try:
            return status, json.loads(raw) if raw else {}
        except ValueError:
            raise GatewayUnavailable(f"Xendit answered {status} without JSON.") from None

    def session_create(
        self, *, order_id: int, gateway_order_id: str, amount: Decimal, currency: str, now: datetime, ends_at: datetime
    ) -> gateway.Session:
        """An invoice named ``gateway_order_id`` that ends at ``ends_at`` (whole seconds, rounded down), counted from
        ``now`` (both by the database clock): Xendit takes a duration, not an instant."""
        seconds = int((ends_at - now).total_seconds())
        if seconds < self.shortest_session.total_seconds():
            raise ValueError("an invoice is opened for at least the shortest session")
        if amount != amount.to_integral_value():
            raise ValueError(f"the shop charges whole rupiah, not {amount}")  # never rounded or truncated
        body = {
            "external_id": gateway_order_id,
            "amount": int(amount),
            "currency": currency,
            "invoice_duration": seconds,
            "description": f"Order {order_id}",
        }
        status, data = self._call("POST", "/v2/invoices", body)
        invoice_id = data.get("id") if isinstance(data, dict) else None
        invoice_url = data.get("invoice_url") if isinstance(data, dict) else None
        if status not in (200, 201) or not isinstance(invoice_id, str) or not isinstance(invoice_url, str):
            refusal = data.get("error_code") if isinstance(data, dict) else None
            raise GatewayUnavailable(f"Xendit refused the invoice ({status}): {refusal}")
        return gateway.Session(token=invoice_id, redirect_url=invoice_url)

    def notification_read(self, *, body: bytes, headers: Mapping[str, str]) -> str:
        """The ``external_id`` a callback names, once its ``x-callback-token`` is the account's (constant-time); a
        missing or wrong token, or no token configured, raises InvalidSignature (401), a malformed body InvalidInput
        (400). The callback's status, amount and invoice id are not read: the caller asks Xendit."""
        if not self.callback_token:
            raise InvalidSignature("XENDIT_CALLBACK_TOKEN is not configured; refusing all callbacks.")
        token = headers.get(TOKEN_HEADER) or ""
        if not hmac.compare_digest(token.encode(), self.callback_token.encode()):
            raise InvalidSignature("The callback's x-callback-token is missing or wrong.")
        try:
            data = json.loads(body)
        except ValueError:
            raise InvalidInput("The callback is not JSON.", fields={"body": ["A JSON object."]}) from None
        if not isinstance(data, dict):
            raise InvalidInput("The callback is not a JSON object.", fields={"body": ["A JSON object."]})
        return external_id_valid(data.get("external_id"))

    def _invoices(self, external_id: str) -> list[dict[str, Any]]:
        """Every invoice Xendit has under ``external_id`` (oldest first)."""
        query = urllib.parse.urlencode({"external_id": external_id})
        status, data = self._call("GET", f"/v2/invoices?{query}")
        if status == 404:
            return []
        if status != 200 or not isinstance(data, list) or not all(isinstance(i, dict) for i in data):
            raise GatewayUnavailable(f"Xendit refused the invoices of {external_id} ({status}).")
        if any(invoice.get("external_id") != external_id for invoice in data):
            raise GatewayUnavailable(f"Xendit answered the invoices of another id than {external_id}.")
        return data

    def status_get(self, *, gateway_order_id: str) -> gateway.TransactionStatus | None:
        """The state of the invoice named ``gateway_order_id``: the one that took money if any did, else the newest;
        None when Xendit has none. A paid invoice's amount is what was paid (``paid_amount``)."""
        invoices = self._invoices(gateway_order_id)
        if not invoices:
            return None
        paid = [i for i in invoices if STATUSES.get(str(i.get("status"))) == gateway.SETTLED]
        invoice = paid[0] if paid else invoices[-1]
        word = str(invoice.get("status", ""))
        amount_field = "paid_amount" if paid and invoice.get("paid_amount") is not None else "amount"
        try:
            amount = Decimal(str(invoice.get(amount_field)))
        except InvalidOperation:
            raise GatewayUnavailable(f"Xendit answered an unreadable {amount_field} for {gateway_order_id}.") from None
        if not amount.is_finite():
            raise GatewayUnavailable(f"Xendit answered an unreadable {amount_field} for {gateway_order_id}.")
        return gateway.TransactionStatus(
            gateway_order_id=gateway_order_id,
            status=STATUSES.get(word, gateway.OPEN),  # an unknown status is neither money nor its absence
            gateway_status=word,
            amount=amount,
            currency=str(invoice.get("currency") or ""),
            transaction_id=str(invoice.get("id") or ""),
        )

    def transaction_expire(self, *, gateway_order_id: str) -> None:
        """Expire every pending invoice named ``gateway_order_id``; none, or none pending, is fine. An invoice that
        stopped being pending meanwhile (paid, expired) answers 404 and is fine too: its money, if any, is read by the
        next question (the notification, the sweeper, reconciliation)."""
        for invoice in self._invoices(gateway_order_id):
            if invoice.get("status") != "PENDING":
                continue
            invoice_id = urllib.parse.quote(str(invoice.get("id")), safe="")
            status, data = self._call("POST", f"/invoices/{invoice_id}/expire!")
            if status not in (200, 404):
                refusal = data.get("error_code") if isinstance(data, dict) else None
                raise GatewayUnavailable(f"Xendit refused to expire {gateway_order_id} ({status}): {refusal}")


def _seconds(value: str | None) -> int:
    """A ``Retry-After`` in whole seconds (at least 1), or the default when absent or not a number."""
    try:
        return min(60, max(1, math.ceil(float(value)))) if value is not None else RATE_LIMITED_RETRY_AFTER
    except (ValueError, OverflowError):  # not a number, nan, inf
        return RATE_LIMITED_RETRY_AFTER
