"""Midtrans (Snap) behind the gateway seam (``payments.gateway``), over the standard library's HTTP client.

Why not the official ``midtransclient``: it sends every request through ``requests`` with no timeout by default
and raises one exception type for a refusal and an outage alike; the shop needs a bounded wait on every call and must
tell "no transaction" (404) from "no answer". Four calls and one digest are shorter to keep here than a dependency,
and the fake server in ``devtools/fake_midtrans.py`` tests them over real HTTP.

The wire format (Midtrans's documentation): Snap ``POST <snap base>/snap/v1/transactions`` answers ``{token,
redirect_url}``; ``GET <api base>/v2/<order_id>/status`` and ``POST <api base>/v2/<order_id>/expire``; the server key
is the HTTP Basic user. A notification's ``signature_key`` is the hex SHA-512 of ``order_id + status_code +
gross_amount + server key``. The API answers some refusals with HTTP 200 and the refusal in the body's
``status_code`` (404: no such transaction), so both are read.
"""

import base64
import hashlib
import hmac
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings

from payments import gateway
from payments.boundary import boundary
from payments.exceptions import GatewayUnavailable, InvalidSignature
from skincare.errors import InvalidInput

# transaction_status (with fraud_status for `capture`) -> the shop's status (payments.gateway).
STATUSES = {
    "settlement": gateway.SETTLED,
    "capture/accept": gateway.SETTLED,
    "capture/challenge": gateway.OPEN,
    "pending": gateway.OPEN,
    "authorize": gateway.OPEN,
    "deny": gateway.FAILED,
    "cancel": gateway.FAILED,
    "expire": gateway.FAILED,
    "failure": gateway.FAILED,
    "refund": gateway.REFUNDED,
    "partial_refund": gateway.REFUNDED,
}
MAX_BODY_BYTES = 64 * 1024


def signature(*, order_id: str, status_code: str, gross_amount: str, server_key: str) -> str:
    """The hex SHA-512 that Midtrans puts in a notification's ``signature_key``."""
    return hashlib.sha512(f"{order_id}{status_code}{gross_amount}{server_key}".encode()).hexdigest()


def gateway_status(data: dict[str, Any]) -> str:
    """``settlement``, ``capture/accept`` …: the transaction status, with the fraud status for a capture."""
    status = str(data.get("transaction_status", ""))
    return f"{status}/{data.get('fraud_status', '')}" if status == "capture" else status


def gateway_order_id_valid(value: Any) -> str:
    """A notification's ``order_id`` as Midtrans allows it (ASCII, at most 50 characters): the id the shop gave the
    transaction, matched against ``gateway_transactions`` by the caller, never read as an order id."""
    if not isinstance(value, str) or not value or not value.isascii() or len(value) > 50:
        raise InvalidInput(
            "order_id is not a Midtrans order id.", fields={"order_id": ["At most 50 ASCII characters."]}
        )
    return value


class MidtransGateway:
    name = "midtrans"
    shortest_session = timedelta(minutes=1)  # a Snap session lasts whole minutes

    def __init__(self, *, server_key: str, snap_base_url: str, api_base_url: str, timeout: float) -> None:
        self.server_key = server_key
        self.snap_base_url = snap_base_url.rstrip("/")
        self.api_base_url = api_base_url.rstrip("/")
        self.timeout = timeout

    @property
    def expiry_margin(self) -> timedelta:
        return timedelta(seconds=settings.MIDTRANS_EXPIRY_MARGIN_SECONDS)

    @classmethod
    def from_settings(cls) -> "MidtransGateway":
        return cls(
            server_key=settings.MIDTRANS_SERVER_KEY,
            snap_base_url=settings.MIDTRANS_SNAP_BASE_URL,
            api_base_url=settings.MIDTRANS_API_BASE_URL,
            timeout=settings.MIDTRANS_TIMEOUT_SECONDS,
        )

    def _call(self, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        """One request with the server key through this process's gateway boundary (``payments.boundary``: answered
        whole within the timeout, a bulkhead, a circuit breaker): (HTTP status, JSON body). No answer, a 5xx or a
        body that is not JSON raises GatewayUnavailable."""
        endpoint = "snap" if url.startswith(self.snap_base_url + "/snap/") else "core api"
        return boundary().call(lambda: self._request(method, url, body), deadline=self.timeout, endpoint=endpoint)

    def _request(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        """The request itself (each socket operation bounded by the timeout too, so a thread given up on ends)."""
        auth = base64.b64encode(f"{self.server_key}:".encode()).decode()
        request = urllib.request.Request(  # noqa: S310 - the base URLs are settings (https in production)
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Basic {auth}",
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                status, raw = response.status, response.read(MAX_BODY_BYTES)
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read(MAX_BODY_BYTES)
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, a malformed URL
            raise GatewayUnavailable(f"Midtrans did not answer: {exc}") from exc
        if status >= 500:
            raise GatewayUnavailable(f"Midtrans answered {status}.")
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise GatewayUnavailable(f"Midtrans answered {status} without JSON.") from None
        if not isinstance(data, dict):
            raise GatewayUnavailable(f"Midtrans answered {status} with unexpected JSON.")
        return status, data

    def session_create(
        self, *, order_id: int, gateway_order_id: str, amount: Decimal, currency: str, now: datetime, ends_at: datetime
    ) -> gateway.Session:
        """A Snap session that ends at ``ends_at`` (whole minutes, rounded down), counted from ``now`` (both by
        the database clock)."""
        minutes = int((ends_at - now).total_seconds() // 60)
        if minutes < 1:
            raise ValueError("a Snap session lasts at least one minute")
        if amount != amount.to_integral_value():
            raise ValueError(f"Snap charges whole rupiah, not {amount}")  # never rounded or truncated
        gross_amount = int(amount)
        body = {
            "transaction_details": {"order_id": gateway_order_id, "gross_amount": gross_amount},
            "item_details": [{"id": str(order_id), "price": gross_amount, "quantity": 1, "name": f"Order {order_id}"}],
            "custom_expiry": {
                "order_time": now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S +0000"),
                "expiry_duration": minutes,
                "unit": "minute",
            },
            "page_expiry": {"duration": minutes, "unit": "minutes"},
        }
        status, data = self._call("POST", f"{self.snap_base_url}/snap/v1/transactions", body)
        token, redirect_url = data.get("token"), data.get("redirect_url")
        if status not in (200, 201) or not isinstance(token, str) or not isinstance(redirect_url, str):
            raise GatewayUnavailable(f"Midtrans refused the Snap session ({status}): {data.get('error_messages')}")
        return gateway.Session(token=token, redirect_url=redirect_url)

    def notification_read(self, *, body: bytes, headers: Mapping[str, str]) -> str:
        """The gateway order id a notification names, once its ``signature_key`` (in the body) is verified
        (constant-time); anything else raises InvalidSignature (401) or InvalidInput (400)."""
        if not self.server_key:
            raise InvalidSignature("MIDTRANS_SERVER_KEY is not configured; refusing all notifications.")
        try:
            data = json.loads(body)
        except ValueError:
            raise InvalidSignature("The notification is not JSON.") from None
        names = ("order_id", "status_code", "gross_amount", "signature_key")
        fields = [data.get(name) for name in names] if isinstance(data, dict) else []
        if len(fields) != len(names) or not all(isinstance(value, str) and value.isascii() for value in fields):
            raise InvalidSignature("The notification lacks order_id, status_code, gross_amount or signature_key.")
        order_id, status_code, gross_amount, signature_key = (str(value) for value in fields)
        expected = signature(
            order_id=order_id, status_code=status_code, gross_amount=gross_amount, server_key=self.server_key
        )
        if not hmac.compare_digest(expected.encode(), signature_key.lower().encode()):
            raise InvalidSignature("The notification's signature_key does not match.")
        return gateway_order_id_valid(order_id)

    def status_get(self, *, gateway_order_id: str) -> gateway.TransactionStatus | None:
        order_id = gateway_order_id
        status, data = self._call("GET", f"{self.api_base_url}/v2/{order_id}/status")
        if status == 404 or str(data.get("status_code")) == "404":
            return None
        if status != 200:
            raise GatewayUnavailable(f"Midtrans refused the status of order {order_id} ({status}).")
        word = gateway_status(data)
        try:
            amount = Decimal(str(data.get("gross_amount")))
        except InvalidOperation:
            raise GatewayUnavailable(f"Midtrans answered an unreadable gross_amount for order {order_id}.") from None
        if str(data.get("order_id")) != str(order_id) or not amount.is_finite():
            raise GatewayUnavailable(f"Midtrans answered the status of another order than {order_id}.")
        return gateway.TransactionStatus(
            gateway_order_id=order_id,
            status=STATUSES.get(word, gateway.OPEN),  # an unknown status is neither money nor its absence
            gateway_status=word,
            amount=amount,
            currency=str(data.get("currency") or ""),
            transaction_id=str(data.get("transaction_id") or ""),
        )

    def transaction_expire(self, *, gateway_order_id: str) -> None:
        """Close the order's transaction; one that does not exist (404) or is already final (412) is fine."""
        order_id = gateway_order_id
        status, data = self._call("POST", f"{self.api_base_url}/v2/{order_id}/expire")
        code = str(data.get("status_code", status))
        if code not in ("200", "407", "404", "412"):
            raise GatewayUnavailable(f"Midtrans refused to expire order {order_id} ({code}).")
