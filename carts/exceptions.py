"""Carts' domain errors: each is one class that declares its code, HTTP status and fields (the body's fields, in
this order; see ``skincare.errors``)."""

from skincare.errors import NOT_FOUND_WHEN, DomainError


class _CartError(DomainError):
    cart_id: str


class CartNotFound(_CartError):
    """No such cart, or another customer's (the two look the same)."""

    code = "cart_not_found"
    http_status = 404
    when = NOT_FOUND_WHEN
    default_message = "Cart not found."


class CartExpired(_CartError):
    """The cart was not changed for CART_TTL_SECONDS (database clock): the seed's 410, rebuild the cart."""

    code = "cart_expired"
    http_status = 410
    when = "`GET`/`PUT`/checkout of a cart not changed for `CART_TTL_SECONDS` (database clock); nothing written"
    default_message = "This cart has expired; please rebuild it."


class CartCheckedOut(_CartError):
    """The cart already became an order (``order_id`` names it); it cannot be changed or checked out again."""

    code = "cart_checked_out"
    http_status = 409
    when = (
        "a `PUT` or checkout of a cart that already became an order (`order_id` names it); a cart is checked out at "
        "most once however many requests race"
    )
    default_message = "This cart was already checked out."

    order_id: int


class TooManyOpenCarts(DomainError):
    """The customer already has MAX_OPEN_CARTS_PER_CUSTOMER open, unexpired carts (each row lives a day)."""

    code = "too_many_open_carts"
    http_status = 409
    when = (
        "`POST /v1/carts` when the customer already has `MAX_OPEN_CARTS_PER_CUSTOMER` open, unexpired carts "
        "(`max_open_carts`); nothing written"
    )
    default_message = "You have too many open carts; check one out or let one expire."

    max_open_carts: int
