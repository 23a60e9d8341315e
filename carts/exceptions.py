"""Carts' domain errors; each declares its code and HTTP status (see ``skincare.errors``)."""

from skincare.errors import DomainError


class CartNotFound(DomainError):
    """No such cart, or another customer's (the two look the same)."""

    code = "cart_not_found"
    http_status = 404
    default_message = "Cart not found."


class CartExpired(DomainError):
    """The cart was not changed for CART_TTL_SECONDS (database clock): the seed's 410, rebuild the cart."""

    code = "cart_expired"
    http_status = 410
    default_message = "This cart has expired; please rebuild it."


class CartCheckedOut(DomainError):
    """The cart already became an order (``order_id`` names it); it cannot be changed or checked out again."""

    code = "cart_checked_out"
    http_status = 409
    default_message = "This cart was already checked out."
