"""Inventory's domain errors; each declares its code and HTTP status (see ``skincare.errors``)."""

from skincare.errors import DomainError


class ProductNotFound(DomainError):
    """A product that was asked for by id does not exist (a missing resource: 404)."""

    code = "product_not_found"
    http_status = 404
    default_message = "Product not found."


class InvalidProduct(DomainError):
    """A checkout names a product that does not exist or is not for sale. The request is well-formed but its
    data is wrong, so it is a 422 (the seed's mapping), not a 404: the checkout resource itself exists."""

    code = "invalid_product"
    http_status = 422
    default_message = "One or more products do not exist or are not for sale."


class StockConflict(DomainError):
    """Not enough available stock for a reservation (it may just have been taken by another customer)."""

    code = "stock_conflict"
    http_status = 409
    default_message = "Not enough stock for one or more products; refresh your cart."


class StockWouldGoNegative(DomainError):
    code = "stock_would_go_negative"
    http_status = 409
    default_message = "This change would push available stock below zero."


class StaleStockVersion(DomainError):
    """The inventory row changed after the caller read it (optimistic check, like HTTP If-Match)."""

    code = "stale_version"
    http_status = 409
    default_message = "Stock changed while you were editing; reload and try again."


class InventoryCorrupted(DomainError):
    """A counter does not hold the units a reservation says it holds. Never expected; audit_inventory reports it."""

    code = "inventory_corrupted"
    http_status = 500
    expose = False
    default_message = "Inventory counters disagree with reservations."


class LockBusy(DomainError):
    """A ``row_lock_nowait`` product's stock row is locked by another checkout right now; try again shortly."""

    code = "lock_busy"
    http_status = 409
    retry_after = 1
    default_message = "This product is being bought by someone else right now; please retry in a moment."
