"""Inventory's domain errors: each is one class that declares its code, HTTP status and fields (the body's fields,
in this order; see ``skincare.errors``)."""

from datetime import datetime

from skincare.errors import NOT_FOUND_WHEN, DomainError, RetryAfterError


class ProductsError(DomainError):
    """An error about some products of a request: ``product_ids`` names every one (ascending)."""

    product_ids: list[int]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.product_ids = sorted(self.product_ids)


class ProductNotFound(DomainError):
    """A product that was asked for by id does not exist (a missing resource: 404)."""

    code = "product_not_found"
    http_status = 404
    when = NOT_FOUND_WHEN
    default_message = "Product not found."

    product_id: int


class InvalidProduct(ProductsError):
    """A checkout names a product that does not exist or is not for sale. The request is well-formed but its
    data is wrong, so it is a 422 (the seed's mapping), not a 404: the checkout resource itself exists."""

    code = "invalid_product"
    http_status = 422
    when = (
        "a checkout, or a cart's create/replace, names an unknown or inactive product (`product_ids` lists them): "
        "the request is well-formed, its data is not"
    )
    default_message = "One or more products do not exist or are not for sale."


class StockConflict(ProductsError):
    """Not enough available stock for a reservation (it may just have been taken by another customer).
    ``gave_up_after`` is the number of attempts of an ``optimistic`` product whose version check kept losing, and
    null otherwise."""

    code = "stock_conflict"
    http_status = 409
    when = (
        "not enough stock; `product_ids` names every short product (an `optimistic` product whose version check "
        "kept losing adds `gave_up_after`)"
    )
    default_message = "Not enough stock for one or more products; refresh your cart."

    gave_up_after: int | None = None


class StockWouldGoNegative(DomainError):
    """A stock change would leave ``available_stock`` below zero: ``requested`` is the signed change (an adjustment)
    or the figure asked for (a count, initial stock)."""

    code = "stock_would_go_negative"
    http_status = 409
    when = (
        "an ops stock change (adjust, count, initial stock) that would leave available stock below zero "
        "(`product_id`, `requested`); the admin and `flash_sale_setup` show it, no API endpoint changes stock"
    )
    default_message = "This change would push available stock below zero."

    product_id: int | None
    requested: int


class StaleStockVersion(DomainError):
    """The product's stock changed after the caller read it (optimistic check, like HTTP If-Match): ``version`` is
    the stock version now, ``expected_version`` the one the caller read."""

    code = "stale_version"
    http_status = 409
    when = (
        "an ops stock change made from a form whose stock has changed since it was read (`product_id`, "
        "`expected_version`, `version`): reload and retry"
    )
    default_message = "Stock changed while you were editing; reload and try again."

    product_id: int
    expected_version: int
    version: int


class InventoryCorrupted(ProductsError):
    """A counter does not hold the units a reservation says it holds. Never expected; audit_inventory reports it."""

    code = "inventory_corrupted"
    http_status = 500
    expose = False
    default_message = "Inventory counters disagree with reservations."


class LockBusy(ProductsError):
    """A ``row_lock_nowait`` product's stock row is locked by another checkout right now; try again shortly."""

    code = "lock_busy"
    http_status = 409
    when = (
        "a `row_lock_nowait` product's stock row is held by another checkout right now; retry after `Retry-After: "
        "1` ([strategies](docs/strategies.md))"
    )
    retry_after = 1
    default_message = "This product is being bought by someone else right now; please retry in a moment."


class SaleNotStarted(RetryAfterError, ProductsError):
    """A checkout of a product whose sale window has not opened yet by the database clock of the checkout's
    transaction. ``starts_at`` is when the last of ``product_ids`` opens; ``retry_after`` the whole seconds until
    then (at least 1), per instance. Retryable, so never stored under an Idempotency-Key: the same key can buy once
    the sale opens."""

    code = "sale_not_started"
    http_status = 409
    when = (
        "a product's sale window has not opened yet by the database clock: `product_ids`, `starts_at`, and "
        "`Retry-After` = whole seconds to the opening (at least 1); nothing written, never stored under an "
        "`Idempotency-Key` (the same key buys once the sale opens) ([sale windows](docs/sale-windows.md))"
    )
    default_message = "The sale has not started yet; retry after the time in Retry-After."

    starts_at: datetime


class SaleEnded(ProductsError):
    """A checkout of a product whose sale window has closed by the database clock. Retrying cannot help."""

    code = "sale_ended"
    http_status = 410
    when = "a product's sale window has closed by the database clock (`product_ids`); nothing written"
    default_message = "The sale has ended."
