"""Carts' domain errors: each is one class that declares its code, HTTP status and fields (the body's fields, in
this order; see ``skincare.errors``)."""

from skincare.errors import DomainError


class _CartError(DomainError):
    cart_id: str


class CartNotFound(_CartError):
    """No such cart, or another customer's (the two look the same)."""

    code = "cart_not_found"
    http_status = 404
    default_message = "Cart not found."


class CartExpired(_CartError):
    """The cart was not changed for CART_TTL_SECONDS (database clock): the seed's 410, rebuild the cart."""

    code = "cart_expired"
    http_status = 410
    default_message = "This cart has expired; please rebuild it."


class CartCheckedOut(_CartError):
    """The cart already became an order (``order_id`` names it); it cannot be changed or checked out again."""

    code = "cart_checked_out"
    http_status = 409
    default_message = "This cart was already checked out."

    order_id: int


class TooManyOpenCarts(DomainError):
    """The customer already has MAX_OPEN_CARTS_PER_CUSTOMER open, unexpired carts (each row lives a day)."""

    code = "too_many_open_carts"
    http_status = 409
    default_message = "You have too many open carts; check one out or let one expire."

    max_open_carts: int
