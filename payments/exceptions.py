"""Payments' domain errors: each is one class that declares its code, HTTP status and fields (the body's fields,
in this order; see ``skincare.errors``)."""

from dataclasses import field

from skincare.errors import DomainError, RetryAfterError


class InvalidSignature(DomainError):
    code = "invalid_signature"
    http_status = 401
    default_message = "Missing or invalid webhook signature."


class _KeyError(DomainError):
    idempotency_key: str


class IdempotencyKeyReused(_KeyError):
    """The customer sent this ``Idempotency-Key`` before with a different request body."""

    code = "idempotency_key_reused"
    http_status = 422
    default_message = "This Idempotency-Key was already used with a different request body."


class IdempotencyKeyInProgress(_KeyError):
    """A request with this key has no stored answer yet. Not expected: a concurrent request with the same key waits
    for the first one to commit (or gets 503 busy after DB_LOCK_TIMEOUT_MS); kept as the safe answer regardless."""

    code = "idempotency_key_in_progress"
    http_status = 409
    retry_after = 1
    default_message = "A request with this Idempotency-Key is still being processed; retry shortly."


class RateLimited(RetryAfterError):
    """Too many checkouts by this customer in the current window (CHECKOUT_RATE_LIMIT). The body carries
    ``retry_after`` as well as the header (it is declared as this class's own field)."""

    code = "rate_limited"
    http_status = 429
    default_message = "Too many checkouts; retry after the time in Retry-After."

    retry_after: int | None = field(default=None, init=False)
    limit: str


class GatewayUnavailable(DomainError):
    """The payment gateway did not answer in time (or answered with an error); the order's reservation still holds
    until its deadline."""

    code = "gateway_unavailable"
    http_status = 503
    retry_after = 5
    default_message = "The payment gateway is not answering right now; your order is still reserved, retry shortly."


class PaymentWindowClosing(DomainError):
    """Too little of the order's payment window is left for a payment page that must close before it does."""

    code = "payment_window_closing"
    http_status = 409
    default_message = "Too little time is left to pay this order."

    order_id: int


class AmountNotChargeable(DomainError):
    """The order's total has a fraction and the gateway charges whole units only (the catalogue refuses such prices
    now, ``inventory.catalogue.price_problem``; an order placed at one before the switch to that gateway cannot be
    paid there, and is never charged a rounded amount)."""

    code = "amount_not_chargeable"
    http_status = 409
    default_message = "This order's total cannot be charged by the payment gateway (it charges whole amounts only)."

    order_id: int
