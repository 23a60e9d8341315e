"""Carts' reads: a customer's cart with its items' current prices and availability, in one statement."""

import dataclasses
import uuid
from datetime import datetime
from decimal import Decimal

from django.contrib.auth.models import User
from django.db import connection

from inventory.selectors import SALE_STATE_SQL, STOCK_SUM_SQL, UNIT_PRICE_SQL


@dataclasses.dataclass(frozen=True)
class CartLine:
    product_id: int
    qty: int
    unit_price: Decimal | None  # what a checkout would charge now (sale price in an open window); None: not for sale
    available_stock: int  # units on sale right now (an unlocked read: it may change before checkout)
    sale: str | None = None  # the product's sale window by the database clock: scheduled | open | ended | None

    @property
    def for_sale(self) -> bool:
        return self.unit_price is not None

    @property
    def in_stock(self) -> bool:
        return self.for_sale and self.available_stock >= self.qty


@dataclasses.dataclass(frozen=True)
class CartView:
    cart_id: uuid.UUID
    status: str
    expires_at: datetime
    expired: bool  # by the database clock, when it was read
    order_id: int | None
    lines: list[CartLine]


# One statement: the cart, its items, and each product's current unit price, stock and sale window, by the rules the
# product API and the checkout use (inventory.selectors: STOCK_SUM_SQL, UNIT_PRICE_SQL, SALE_STATE_SQL). An
# unlocked read: a cart never locks stock.
_CART_SQL = f"""
SELECT c.status, c.expires_at, c.expires_at <= now(), c.order_id,
       ci.product_id, ci.qty, CASE WHEN p.is_active THEN {UNIT_PRICE_SQL} END, COALESCE(stock.available_stock, 0),
       CASE WHEN p.is_active THEN {SALE_STATE_SQL} END
FROM carts c
LEFT JOIN cart_items ci ON ci.cart_id = c.id
LEFT JOIN products p ON p.id = ci.product_id
{STOCK_SUM_SQL}
WHERE c.id = %s AND c.customer_id = %s
ORDER BY ci.product_id
"""


def cart_get_for_customer(*, cart_id: uuid.UUID, customer: User) -> CartView | None:
    """The customer's own cart with its lines (by product id), or None: someone else's cart looks like a missing
    one."""
    with connection.cursor() as cursor:
        cursor.execute(_CART_SQL, [cart_id, customer.pk])
        rows = cursor.fetchall()
    if not rows:
        return None
    status, expires_at, expired, order_id = rows[0][:4]
    lines = [
        CartLine(product_id=row[4], qty=row[5], unit_price=row[6], available_stock=row[7], sale=row[8])
        for row in rows
        if row[4] is not None
    ]
    return CartView(
        cart_id=cart_id, status=status, expires_at=expires_at, expired=expired, order_id=order_id, lines=lines
    )
