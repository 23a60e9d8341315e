"""Orders' domain errors; each declares its code, HTTP status and fields (see ``skincare.errors``)."""

from typing import Any

from skincare.errors import DomainError


class OrderNotFound(DomainError):
    code = "order_not_found"
    http_status = 404
    default_message = "Order not found."

    def __init__(self, *, order_id: int) -> None:
        super().__init__()
        self.order_id = order_id

    def data(self) -> dict[str, Any]:
        return {"order_id": self.order_id}


class OrderNotPending(DomainError):
    """The order already left ``pending_payment`` (paid, cancelled or expired)."""

    code = "order_not_pending"
    http_status = 409
    default_message = "The order is no longer pending payment."

    def __init__(self, *, order_id: int, status: str) -> None:
        super().__init__()
        self.order_id = order_id
        self.status = status

    def data(self) -> dict[str, Any]:
        return {"order_id": self.order_id, "status": self.status}


class PurchaseLimitExceeded(DomainError):
    """The customer's units of a limited product (pending and paid orders plus this request) would exceed the
    product's ``max_per_customer``; ``product_ids`` names every such product."""

    code = "purchase_limit_exceeded"
    http_status = 409
    default_message = "This order would exceed the per-customer limit of one or more products."

    def __init__(self, *, product_ids: list[int]) -> None:
        super().__init__()
        self.product_ids = sorted(product_ids)

    def data(self) -> dict[str, Any]:
        return {"product_ids": self.product_ids}


class TooManyPendingOrders(DomainError):
    """The customer already holds ``MAX_PENDING_ORDERS_PER_CUSTOMER`` unpaid orders: pay or cancel one first."""

    code = "too_many_pending_orders"
    http_status = 409
    default_message = "You have too many unpaid orders; pay or cancel one first."

    def __init__(self, *, max_pending_orders: int) -> None:
        super().__init__()
        self.max_pending_orders = max_pending_orders

    def data(self) -> dict[str, Any]:
        return {"max_pending_orders": self.max_pending_orders}
