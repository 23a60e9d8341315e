from decimal import Decimal
from typing import NamedTuple

from django.db import connection


class ProductView(NamedTuple):
    """A product as the public API shows it."""

    id: int
    sku: str
    name: str
    price: Decimal
    max_per_customer: int | None
    available_stock: int
    inventory_strategy: str


# Fixed statements: a product read is one round trip and no ORM compilation (docs/benchmarks.md).
_PRODUCTS_SQL = """
SELECT p.id, p.sku, p.name, p.price, p.max_per_customer, COALESCE(i.available_stock, 0), p.inventory_strategy
FROM products p LEFT JOIN inventories i ON i.product_id = p.id
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


def products_for_sale(*, product_ids: list[int]) -> dict[int, ProductView]:
    """The active ones of ``product_ids`` (unknown and inactive ids are absent), one query, no lock: what a cart
    shows and validates against (carts never touch the stock rows' locks)."""
    with connection.cursor() as cursor:
        cursor.execute(_PRODUCTS_SQL + " AND p.id = ANY(%s)", [product_ids])
        return {row[0]: ProductView(*row) for row in cursor.fetchall()}
