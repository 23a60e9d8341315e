"""Payments' domain errors: each is one class that declares its code, HTTP status and fields (the body's fields,
in this order; see ``skincare.errors``)."""

from skincare.errors import DomainError, RetryAfterError


class InvalidSignature(DomainError):
    code = "invalid_signature"
    http_status = 401
    when = (
        "the webhook's `X-Signature` (a Midtrans notification's `signature_key`, a Xendit callback's "
        "`x-callback-token`) is missing, malformed, outside the time window or wrong, or no secret is configured, or "
        "the notification is of a gateway this shop does not use"
    )
    default_message = "Missing or invalid webhook signature."


class GatewayUnavailable(DomainError):
    """The payment gateway did not answer in time (or answered with an error); the order's reservation still holds
    until its deadline."""

    code = "gateway_unavailable"
    http_status = 503
    when = (
        "the payment gateway did not answer within its timeout (`MIDTRANS_TIMEOUT_SECONDS`, `XENDIT_TIMEOUT_SECONDS`), "
        "refused the call for its rate limit, or this process is not asking it right now (it failed "
        "`GATEWAY_BREAKER_FAILURES` times in a row, or `GATEWAY_MAX_CALLS` calls already wait for it) (payment page: "
        "the reservation still holds; notification: the gateway retries); `Retry-After`: 5, the gateway's wait, or "
        "the seconds until it is asked again"
    )
    retry_after = 5
    default_message = "The payment gateway is not answering right now; your order is still reserved, retry shortly."


class GatewayRateLimited(GatewayUnavailable):
    """The gateway refused the call for its rate limit (HTTP 429): nothing was done there, and the gateway is up (the
    circuit breaker does not count it); the same 503 ``gateway_unavailable``, with the gateway's wait."""


class PaymentPagesPaced(RetryAfterError):
    """The gateway's payment pages are created at their pace (``PAYMENT_SESSIONS_PER_SECOND``, shared by every web
    process) and this visit's turn has not come: nothing was asked of the gateway, the reservation still holds."""

    code = "payment_pages_paced"
    http_status = 503
    when = (
        "a payment page's turn has not come: pages are created at `PAYMENT_SESSIONS_PER_SECOND` across the shop, "
        "and a visit that must wait books the next free turn (a gateway's 429 moves every turn on by its wait); the "
        "reservation still holds; `turn_in_ms`: the milliseconds to that turn, when a visit creates the page "
        "(`Retry-After`: the same in whole seconds, rounded up)"
    )
    default_message = "Payment pages are being prepared in turn; your order is still reserved, retry shortly."

    order_id: int
    turn_in_ms: int


class PaymentWindowClosing(DomainError):
    """Too little of the order's payment window is left for a payment page that must close before it does."""

    code = "payment_window_closing"
    http_status = 409
    when = (
        "a gateway's payment page for an order with less than the gateway's expiry margin "
        "(`MIDTRANS_EXPIRY_MARGIN_SECONDS`, `XENDIT_EXPIRY_MARGIN_SECONDS`) + 1 minute left"
    )
    default_message = "Too little time is left to pay this order."

    order_id: int


class AmountNotChargeable(DomainError):
    """The order's total has a fraction and the gateway charges whole units only (the catalogue refuses such prices
    now, ``inventory.catalogue.price_problem``; an order placed at one before the switch to that gateway cannot be
    paid there, and is never charged a rounded amount)."""

    code = "amount_not_chargeable"
    http_status = 409
    when = (
        "a gateway's payment page for an order whose total has a fraction (Midtrans and Xendit are charged whole "
        "rupiah; the catalogue refuses such prices while either is the gateway, so only an order placed before the "
        "switch can have one): never charged a rounded amount"
    )
    default_message = "This order's total cannot be charged by the payment gateway (it charges whole amounts only)."

    order_id: int
