"""The payment gateway seam: what the shop asks of a gateway, whichever it is (``PAYMENT_GATEWAY``).

- :meth:`Gateway.session_create`: a payment page for one order, ending at a given instant (where the buyer pays);
- :meth:`Gateway.notification_read`: verify an incoming notification (its body and headers) and read which
  transaction it names;
- :meth:`Gateway.status_get`: the gateway's own word on an order's transaction (``None``: it has none);
- :meth:`Gateway.transaction_expire`: close a transaction that is still open, so it can take no more money.

Every call is a network call with a bounded timeout (``timeout``), made outside any database transaction; a gateway
that does not answer raises :class:`payments.exceptions.GatewayUnavailable`. A gateway names a transaction by the id
the shop gave it (``gateway_order_id``: Midtrans's ``order_id``, Xendit's ``external_id``); the shop maps that id to an
order through ``gateway_transactions`` (the ids it issued), never by reading an order id out of it. What differs
between gateways (a signature in the body or a token in a header, an expiry as an instant or a duration, how long a
page must last at least, whole amounts only) stays inside each gateway's module; ``payments.sessions`` (the pages,
the sweeper's questions, reconciliation) and ``payments.services`` (the events) never ask which gateway it is.

Three gateways: ``sandbox`` (the built-in page of ``payments.sandbox``: it pays through the signed webhook and keeps
no gateway-side state), ``midtrans`` (``payments.midtrans``) and ``xendit`` (``payments.xendit``).
``payments.sessions.configured_gateway`` picks one; a fourth is one module like those and one line there.
"""

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Protocol

from payments.exceptions import InvalidSignature

# A transaction's status, in the shop's words (each gateway maps its own onto these).
SETTLED = "settled"  # the money is taken
OPEN = (
    "open"  # the buyer started paying and may still finish (Midtrans `pending`, a challenged capture, Xendit `PENDING`)
)
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
    timeout: float  # seconds: every call answered whole within it
    shortest_session: timedelta  # a page shorter than this is not opened (409 payment_window_closing)

    @property
    def expiry_margin(self) -> timedelta:
        """A page ends this long before the order's deadline (database clock)."""
        ...

    # ``gateway_order_id``: the id the gateway knows the order's transaction by (payments.models.PaymentSession).
    def session_create(
        self, *, order_id: int, gateway_order_id: str, amount: Decimal, currency: str, now: datetime, ends_at: datetime
    ) -> Session: ...

    # The transaction a verified notification names; InvalidSignature (401) when it is not the gateway's.
    def notification_read(self, *, body: bytes, headers: Mapping[str, str]) -> str: ...

    def status_get(self, *, gateway_order_id: str) -> TransactionStatus | None: ...

    def transaction_expire(self, *, gateway_order_id: str) -> None: ...


class SandboxGateway:
    """The built-in page: its buttons post signed webhooks, so there is no gateway-side state to ask about."""

    name = "sandbox"
    timeout = 0.0
    expiry_margin = timedelta(0)
    shortest_session = timedelta(0)

    def session_create(
        self, *, order_id: int, gateway_order_id: str, amount: Decimal, currency: str, now: datetime, ends_at: datetime
    ) -> Session:
        raise NotImplementedError("the sandbox's payment_url is its signed page (payments.sandbox.payment_url)")

    def notification_read(self, *, body: bytes, headers: Mapping[str, str]) -> str:
        """Refused like a notification without a configured key (401): the sandbox notifies through the signed
        webhook (payments.api.PaymentWebhookApi), never through a gateway's notification endpoint."""
        raise InvalidSignature("Gateway notifications are not enabled here (PAYMENT_GATEWAY is sandbox).")

    def status_get(self, *, gateway_order_id: str) -> TransactionStatus | None:
        return None

    def transaction_expire(self, *, gateway_order_id: str) -> None:
        return None
