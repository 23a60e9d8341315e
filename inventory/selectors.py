from decimal import Decimal
from typing import Any, NamedTuple

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


class Quote(NamedTuple):
    price: Decimal
    available: int
    strategy: str
    version: int
    max_per_customer: int | None


_QUOTES_SQL = """
SELECT p.id, p.price, COALESCE(i.available_stock, 0), p.inventory_strategy, COALESCE(i.version, 0),
       p.max_per_customer{also}
FROM products p LEFT JOIN inventories i ON i.product_id = p.id
WHERE p.id = ANY(%s) AND p.is_active
"""
_QUOTES_SQLS = {also: _QUOTES_SQL.format(also=also) for also in ("",)}


def product_quotes(*, product_ids: list[int], also_select: tuple[str, list[Any]] | None = None) -> dict[int, Quote]:
    """Price, available stock, inventory strategy and per-customer limit of the products that are for sale (inactive
    and unknown ids are absent). An unlocked read, one fixed statement: a checkout uses it to refuse early, never to
    decide a sale. ``also_select`` adds a caller's expression to the statement (checkout takes the customer's lock
    with it)."""
    sql, params = _QUOTES_SQLS[""], [product_ids]
    if also_select is not None:
        sql = _QUOTES_SQL.format(also=", " + also_select[0])
        params = [*also_select[1], product_ids]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0]: Quote(*row[1:6]) for row in cursor.fetchall()}
