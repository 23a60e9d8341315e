"""Orders' domain errors; each declares its code and HTTP status (see ``skincare.errors``)."""

from skincare.errors import DomainError


class OrderNotFound(DomainError):
    code = "order_not_found"
    http_status = 404
    default_message = "Order not found."


class OrderNotPending(DomainError):
    """The order already left ``pending_payment`` (paid, cancelled or expired)."""

    code = "order_not_pending"
    http_status = 409
    default_message = "The order is no longer pending payment."
