"""The payment gateway seam: what the shop asks of a gateway, whichever it is (``PAYMENT_GATEWAY``).

- :meth:`Gateway.session_create`: a payment page for one order, ending at a given instant (where the buyer pays);
- :meth:`Gateway.notification_read`: verify an incoming notification and read which transaction it names;
- :meth:`Gateway.status_get`: the gateway's own word on an order's transaction (``None``: it has none);
- :meth:`Gateway.transaction_expire`: close a transaction that is still open, so it can take no more money.

Every call is a network call with a bounded timeout, made outside any database transaction; a gateway that does
not answer raises :class:`payments.exceptions.GatewayUnavailable`. A gateway names a transaction by the id the shop
gave it (``gateway_order_id``); the shop maps that id to an order through ``gateway_transactions`` (the ids it issued),
never by reading an order id out of it. Two gateways: ``sandbox`` (the built-in page of
``payments.sandbox``: it pays through the signed webhook and keeps no gateway-side state) and ``midtrans``
(``payments.midtrans``). ``payments.sessions.configured_gateway`` picks one.
"""

import dataclasses
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from payments.exceptions import InvalidSignature

# A transaction's status, in the shop's words (each gateway maps its own onto these).
SETTLED = "settled"  # the money is taken
OPEN = "open"  # the buyer started paying and may still finish (Midtrans `pending`, a challenged capture)
FAILED = "failed"  # denied, cancelled or expired: no money
REFUNDED = "refunded"  # the money was taken and (partly) given back


@dataclasses.dataclass(frozen=True)
class Session:
    """A payment page the buyer is sent to."""

    token: str
    redirect_url: str


@dataclasses.dataclass(frozen=True)
class TransactionStatus:
    """The gateway's record of one transaction, named by the id the shop gave it."""

    gateway_order_id: str
    status: str  # SETTLED, OPEN, FAILED or REFUNDED
    gateway_status: str  # the gateway's own word (`settlement`, `capture/accept`, …), kept with the event
    amount: Decimal
    currency: str
    transaction_id: str


class Gateway(Protocol):
    name: str

    # ``gateway_order_id``: the id the gateway knows the order's transaction by (payments.models.PaymentSession).
    def session_create(
        self, *, order_id: int, gateway_order_id: str, amount: Decimal, currency: str, now: datetime, ends_at: datetime
    ) -> Session: ...

    def notification_read(self, *, body: bytes) -> str: ...

    def status_get(self, *, gateway_order_id: str) -> TransactionStatus | None: ...

    def transaction_expire(self, *, gateway_order_id: str) -> None: ...


class SandboxGateway:
    """The built-in page: its buttons post signed webhooks, so there is no gateway-side state to ask about."""

    name = "sandbox"

    def session_create(
        self, *, order_id: int, gateway_order_id: str, amount: Decimal, currency: str, now: datetime, ends_at: datetime
    ) -> Session:
        raise NotImplementedError("the sandbox's payment_url is its signed page (payments.sandbox.payment_url)")

    def notification_read(self, *, body: bytes) -> str:
        """Refused like a notification without a configured key (401): the sandbox notifies through the signed
        webhook (payments.api.PaymentWebhookApi), never through Midtrans's endpoint."""
        raise InvalidSignature("Midtrans notifications are not enabled here (PAYMENT_GATEWAY is sandbox).")

    def status_get(self, *, gateway_order_id: str) -> TransactionStatus | None:
        return None

    def transaction_expire(self, *, gateway_order_id: str) -> None:
        return None
