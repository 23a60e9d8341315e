"""Carts' domain errors; each declares its code, HTTP status and fields (see ``skincare.errors``)."""

from typing import Any

from skincare.errors import DomainError


class _CartError(DomainError):
    def __init__(self, *, cart_id: str) -> None:
        super().__init__()
        self.cart_id = cart_id

    def data(self) -> dict[str, Any]:
        return {"cart_id": self.cart_id}


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

    def __init__(self, *, cart_id: str, order_id: int) -> None:
        super().__init__(cart_id=cart_id)
        self.order_id = order_id

    def data(self) -> dict[str, Any]:
        return {"cart_id": self.cart_id, "order_id": self.order_id}


class TooManyOpenCarts(DomainError):
    """The customer already has MAX_OPEN_CARTS_PER_CUSTOMER open, unexpired carts (each row lives a day)."""

    code = "too_many_open_carts"
    http_status = 409
    default_message = "You have too many open carts; check one out or let one expire."

    def __init__(self, *, max_open_carts: int) -> None:
        super().__init__()
        self.max_open_carts = max_open_carts

    def data(self) -> dict[str, Any]:
        return {"max_open_carts": self.max_open_carts}
