"""Product reads for the API, carts and the checkout: one statement each, no lock.

A product's stock is the sum over its stock rows (:data:`STOCK_SUM_SQL`), and its sale window and unit price are
decided by the database clock (:data:`SALE_STATE_SQL`, :data:`UNIT_PRICE_SQL`): one definition each, which every
statement that needs them uses (the checkout's quote read ``checkout.services.QUOTES_SQL``, the cart read
``carts.selectors``, the waiting room, the audit).
"""

import time
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from django.conf import settings
from django.db import connection

# A product's sale window by the database clock (docs/sale-windows.md): 'scheduled' before sale_starts_at,
# 'ended' from sale_ends_at on, 'open' in between, NULL when the product has no window. ``now()`` is the start of
# the reading transaction: in a checkout that is never later than the order's created_at, so an order can never be
# created before sale_starts_at.
SALE_SCHEDULED, SALE_OPEN, SALE_ENDED = "scheduled", "open", "ended"
SALE_STATE_SQL = f"""CASE WHEN p.sale_starts_at > now() THEN '{SALE_SCHEDULED}'
         WHEN p.sale_ends_at <= now() THEN '{SALE_ENDED}'
         WHEN p.sale_starts_at IS NOT NULL OR p.sale_ends_at IS NOT NULL THEN '{SALE_OPEN}' END"""
# Seconds from now to the opening of a scheduled sale (NULL otherwise), to the microsecond.
SECONDS_TO_START_SQL = """CASE WHEN p.sale_starts_at > now() THEN extract(epoch FROM p.sale_starts_at - now()) END"""
# The unit price a checkout charges: the sale price inside an open window, the regular price otherwise.
UNIT_PRICE_SQL = f"""CASE WHEN p.sale_price IS NOT NULL AND ({SALE_STATE_SQL}) = '{SALE_OPEN}'
         THEN p.sale_price ELSE p.price END"""


# A product's stock, summed over its stock rows (``stock_buckets``), joined to ``products p`` as ``stock``: its
# ``available_stock``, ``reserved_stock``, ``version_sum`` (the sum of the rows' versions) and ``stock_rows``. The one
# definition of a product's stock sum: the product API, a cart, a checkout's quotes and the audit read it here (a
# column a statement does not select is not computed: PostgreSQL drops unused outputs of a sub-select). A LATERAL join
# reads the product's own rows only (a join with the ``inventories`` view would sum every product's first; the view
# is the seed's read and the admin's model). No stock row: NULLs (callers COALESCE).
STOCK_SUM_SQL = """LEFT JOIN LATERAL (
    SELECT sum(b.available_stock)::integer AS available_stock, sum(b.reserved_stock)::integer AS reserved_stock,
           sum(b.version)::bigint AS version_sum, count(*)::integer AS stock_rows
      FROM stock_buckets b WHERE b.product_id = p.id
) stock ON true"""


class ProductView(NamedTuple):
    """A product as the public API shows it."""

    id: int
    sku: str
    name: str
    price: Decimal
    max_per_customer: int | None
    available_stock: int
    inventory_strategy: str
    stock_buckets: int
    sale_price: Decimal | None
    sale_starts_at: datetime | None
    sale_ends_at: datetime | None
    sale: str | None  # scheduled | open | ended, None without a window (database clock)
    seconds_to_start: Decimal | None  # scheduled only

    @property
    def unit_price(self) -> Decimal:
        """What a checkout would charge right now: UNIT_PRICE_SQL's rule on the state read with this row."""
        return self.sale_price if self.sale_price is not None and self.sale == SALE_OPEN else self.price


# Fixed statements: a product read is one round trip and no ORM compilation (docs/benchmarks.md).
_PRODUCTS_SQL = f"""
SELECT p.id, p.sku, p.name, p.price, p.max_per_customer, COALESCE(stock.available_stock, 0), p.inventory_strategy,
       p.stock_buckets, p.sale_price, p.sale_starts_at, p.sale_ends_at, {SALE_STATE_SQL}, {SECONDS_TO_START_SQL}
FROM products p
{STOCK_SUM_SQL}
WHERE p.is_active
"""


def product_list() -> list[ProductView]:
    """Active products with their available stock, in id order (one query)."""
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCTS_SQL + " ORDER BY p.id")
        return [ProductView(*row) for row in cursor.fetchall()]


def product_get(*, product_id: int) -> ProductView | None:
    """One active product, or None when it does not exist or is not for sale."""
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCTS_SQL + " AND p.id = %s", [product_id])
        row = cursor.fetchone()
    return ProductView(*row) if row else None


_recent: dict[int, tuple[float, ProductView]] = {}


def product_get_recent(*, product_id: int) -> ProductView | None:
    """:func:`product_get`, remembered by this process for PRODUCT_READ_MAX_AGE_SECONDS (0: never): the public
    product page during a sale, whose stock and sale state may be that old for a read. Never for a checkout, which
    reads its own quotes (``checkout.services``)."""
    max_age = settings.PRODUCT_READ_MAX_AGE_SECONDS
    now = time.monotonic()
    remembered = _recent.get(product_id)
    if remembered is not None and now - remembered[0] < max_age:
        return remembered[1]
    product = product_get(product_id=product_id)
    if product is not None and max_age > 0:
        _recent[product_id] = (now, product)
    return product


def product_reads_forget() -> None:
    """Drop the products this process remembers (tests)."""
    _recent.clear()


def products_for_sale(*, product_ids: list[int]) -> dict[int, ProductView]:
    """The active ones of ``product_ids`` (unknown and inactive ids are absent), one query, no lock: what a cart
    shows and validates against (carts never touch the stock rows' locks)."""
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCTS_SQL + " AND p.id = ANY(%s)", [product_ids])
        return {row[0]: ProductView(*row) for row in cursor.fetchall()}
