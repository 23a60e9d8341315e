"""Catalogue writes: a new product (with its first stock row) and a product's sale window, price and limit.

Stock counters are changed only by ``inventory.reserve`` and ``inventory.services``; a new product's initial stock is
bucket 0's first units, with its ``restock`` ledger row (``inventory.buckets``).
"""

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models.functions import Now

from inventory.buckets import LedgerRow, ledger_append
from inventory.exceptions import ProductNotFound, StockWouldGoNegative
from inventory.models import InventoryStrategy, Product, StockBucket, StockMovement
from skincare.errors import InvalidInput

Reason = StockMovement.Reason

# The gateways that charge whole units only, with their rule: while one of them is PAYMENT_GATEWAY a price or sale
# price with a fraction is refused here, where it is set (the product page, flash_sale_setup, the demo data), never
# rounded or truncated on its way to the gateway.
WHOLE_UNIT_GATEWAYS = {
    "midtrans": "Midtrans charges whole rupiah only (Snap's gross_amount is an integer)",
    "xendit": "Xendit's invoices are charged in whole rupiah only",
}


def sentence(text: str) -> str:
    """``text`` as a sentence: its first letter upper-case (a gateway's name keeps its own), a full stop."""
    return text[:1].upper() + text[1:] + "."


def price_problem(*, field: str, value: Decimal | str | None) -> str | None:
    """Why ``value`` cannot be a product's ``field`` (``price`` or ``sale_price``), or None when it can."""
    if value is None:
        return None
    value = Decimal(str(value))  # a price given as text ("129000.00") reads as that number
    if value < 0:
        return f"the {field.replace('_', ' ')} must not be negative"
    rule = WHOLE_UNIT_GATEWAYS.get(settings.PAYMENT_GATEWAY)
    if rule is not None and value != value.to_integral_value():
        return f"the {field.replace('_', ' ')} {value} has a fraction: {rule}"
    return None


@transaction.atomic
def product_create(
    *,
    sku: str,
    name: str,
    price: Decimal,
    initial_stock: int = 0,
    is_active: bool = True,
    inventory_strategy: str = InventoryStrategy.GUARDED_UPDATE,
    actor: User | None = None,
    product_id: int | None = None,
    max_per_customer: int | None = None,
) -> Product:
    """Create a product with its stock row (bucket 0); initial stock is recorded in the ledger as a restock.
    ``max_per_customer`` caps the units one customer may hold (None = no limit). ``stock_buckets_set`` spreads it.
    A price the configured gateway cannot charge raises ``InvalidInput`` (:func:`price_problem`)."""
    if initial_stock < 0:
        raise StockWouldGoNegative(product_id=None, requested=initial_stock)
    if problem := price_problem(field="price", value=price):
        raise InvalidInput(sentence(problem), fields={"price": [problem]})
    fields: dict[str, Any] = {
        "sku": sku,
        "name": name,
        "price": price,
        "is_active": is_active,
        "inventory_strategy": inventory_strategy,
        "max_per_customer": max_per_customer,
    }
    if product_id is not None:
        fields["id"] = product_id
    product = Product.objects.create(**fields)
    StockBucket.objects.create(product=product, bucket=0, available_stock=initial_stock)
    if initial_stock:
        ledger_append(
            rows=[LedgerRow(product.pk, initial_stock, 0)], reason=Reason.RESTOCK, actor=actor, note="initial stock"
        )
    return product


@transaction.atomic
def product_sale_set(
    *,
    product_id: int,
    starts_at: datetime | None,
    ends_at: datetime | None,
    sale_price: Decimal | None,
    max_per_customer: int | None,
) -> Product:
    """Set (or clear, with all three None) a product's sale window, its sale price and its per-customer limit.

    Times are absolute; callers that think in "starts in N seconds" add N to ``skincare.db.db_now()`` (the
    database clock that checkouts compare them with). Safe during a sale: a checkout reads the window in the same
    statement as its stock and price, so each checkout sees either the old window or the new one, never a mix.
    Bad values raise ``InvalidInput`` and write nothing."""
    problems = []
    if starts_at is not None and ends_at is not None and ends_at <= starts_at:
        problems.append("the sale must end after it starts")
    if problem := price_problem(field="sale_price", value=sale_price):
        problems.append(problem)
    if sale_price is not None and starts_at is None and ends_at is None:
        problems.append("a sale price needs a sale window (a start, an end or both)")
    if max_per_customer is not None and max_per_customer < 1:
        problems.append("max_per_customer must be at least 1 (or empty for no limit)")
    if problems:
        raise InvalidInput(sentence("; ".join(problems)), fields={"sale": problems})
    updated = Product.objects.filter(pk=product_id).update(
        sale_starts_at=starts_at,
        sale_ends_at=ends_at,
        sale_price=sale_price,
        max_per_customer=max_per_customer,
        updated_at=Now(),
    )
    if not updated:
        raise ProductNotFound(product_id=product_id)
    return Product.objects.get(pk=product_id)
