from skincare.errors import DomainError


class ProductNotFound(DomainError):
    code = "product_not_found"
    default_message = "One or more products do not exist or are not for sale."


class StockConflict(DomainError):
    """Not enough available stock for a reservation (it may just have been taken by another customer)."""

    code = "stock_conflict"
    default_message = "Not enough stock for one or more products; refresh your cart."


class StockWouldGoNegative(DomainError):
    code = "stock_would_go_negative"
    default_message = "This change would push available stock below zero."


class StaleStockVersion(DomainError):
    """The inventory row changed after the caller read it (optimistic check, like HTTP If-Match)."""

    code = "stale_version"
    default_message = "Stock changed while you were editing; reload and try again."


class InventoryCorrupted(DomainError):
    """A counter does not hold the units a reservation says it holds. Never expected; audit_inventory reports it."""

    code = "inventory_corrupted"
    default_message = "Inventory counters disagree with reservations."
