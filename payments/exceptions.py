"""Payments' domain errors: each is one class that declares its code, HTTP status and fields (the body's fields,
in this order; see ``skincare.errors``)."""

from skincare.errors import DomainError


class InvalidSignature(DomainError):
    code = "invalid_signature"
    http_status = 401
    default_message = "Missing or invalid webhook signature."


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
