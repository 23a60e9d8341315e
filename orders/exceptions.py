"""Orders' domain errors: each is one class that declares its code, HTTP status and fields (the body's fields, in
this order; see ``skincare.errors``)."""

from inventory.exceptions import ProductsError
from skincare.errors import NOT_FOUND_WHEN, DomainError


class OrderNotFound(DomainError):
    code = "order_not_found"
    http_status = 404
    when = NOT_FOUND_WHEN
    default_message = "Order not found."

    order_id: int


class OrderNotPending(DomainError):
    """The order already left ``pending_payment`` (paid, cancelled or expired)."""

    code = "order_not_pending"
    http_status = 409
    when = "cancel (or a payment page) of an order that is already paid or cancelled"
    default_message = "The order is no longer pending payment."

    order_id: int
    status: str


class PurchaseLimitExceeded(ProductsError):
    """The customer's units of a limited product (pending and paid orders plus this request) would exceed the
    product's ``max_per_customer``; ``product_ids`` names every such product."""

    code = "purchase_limit_exceeded"
    http_status = 409
    when = (
        "the customer's units of a product (paid + open pending orders + this request) would exceed its "
        "`max_per_customer`; `product_ids` names them"
    )
    default_message = "This order would exceed the per-customer limit of one or more products."


class TooManyPendingOrders(DomainError):
    """The customer already holds ``MAX_PENDING_ORDERS_PER_CUSTOMER`` unpaid orders: pay or cancel one first."""

    code = "too_many_pending_orders"
    http_status = 409
    when = (
        "the customer already has `MAX_PENDING_ORDERS_PER_CUSTOMER` unpaid orders (a sold-out product still answers "
        "`stock_conflict`)"
    )
    default_message = "You have too many unpaid orders; pay or cancel one first."

    max_pending_orders: int
