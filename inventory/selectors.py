from decimal import Decimal
from typing import NamedTuple

from django.db import connection
from django.db.models import QuerySet

from inventory.models import Product


def product_list() -> QuerySet[Product]:
    """Active products with their stock counters, in id order (one query)."""
    return Product.objects.filter(is_active=True).select_related("inventory").order_by("pk")


def product_get(*, product_id: int) -> Product | None:
    return product_list().filter(pk=product_id).first()


class Quote(NamedTuple):
    price: Decimal
    available: int


_QUOTES_SQL = """
SELECT p.id, p.price, COALESCE(i.available_stock, 0)
FROM products p LEFT JOIN inventories i ON i.product_id = p.id
WHERE p.id = ANY(%s) AND p.is_active
"""


def product_quotes(*, product_ids: list[int]) -> dict[int, Quote]:
    """Price and available stock of the products that are for sale (inactive and unknown ids are absent).
    An unlocked read, one fixed statement: a checkout uses it to refuse early, never to decide a sale."""
    with connection.cursor() as cursor:
        cursor.execute(_QUOTES_SQL, [product_ids])
        return {pid: Quote(price, available) for pid, price, available in cursor.fetchall()}
