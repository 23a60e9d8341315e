from decimal import Decimal
from typing import NamedTuple

from django.db import connection


class ProductView(NamedTuple):
    """A product as the public API shows it."""

    id: int
    sku: str
    name: str
    price: Decimal
    available_stock: int
    inventory_strategy: str


# Fixed statements: a product read is one round trip and no ORM compilation (docs/benchmarks.md).
_PRODUCTS_SQL = """
SELECT p.id, p.sku, p.name, p.price, COALESCE(i.available_stock, 0), p.inventory_strategy
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


class Quote(NamedTuple):
    price: Decimal
    available: int
    strategy: str
    version: int


_QUOTES_SQL = """
SELECT p.id, p.price, COALESCE(i.available_stock, 0), p.inventory_strategy, COALESCE(i.version, 0)
FROM products p LEFT JOIN inventories i ON i.product_id = p.id
WHERE p.id = ANY(%s) AND p.is_active
"""


def product_quotes(*, product_ids: list[int]) -> dict[int, Quote]:
    """Price, available stock and inventory strategy of the products that are for sale (inactive and unknown ids
    are absent).
    An unlocked read, one fixed statement: a checkout uses it to refuse early, never to decide a sale."""
    with connection.cursor() as cursor:
        cursor.execute(_QUOTES_SQL, [product_ids])
        return {row[0]: Quote(*row[1:]) for row in cursor.fetchall()}
