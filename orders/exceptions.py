from skincare.errors import DomainError


class OrderNotFound(DomainError):
    code = "order_not_found"
    default_message = "Order not found."


class OrderNotPending(DomainError):
    """The order already left ``pending_payment`` (paid, cancelled or expired)."""

    code = "order_not_pending"
    default_message = "The order is no longer pending payment."
