"""Ops stock writes: a stock manager's adjustment, count and bucket count (the admin, ``flash_sale_setup``).

Each is a top-level service run by the one transaction runner (``skincare.db.retry_transient``): behind PgBouncer its
transaction gets the lock and statement timeouts, a deadlock or serialization failure runs it again, a lock or
statement timeout is :class:`~skincare.errors.ServiceBusy` (503). Each locks every stock row of the product in bucket
order (``inventory.buckets.lock_all_buckets``: lock order step 8, docs/locking.md), so it is safe during a sale:
checkouts keep their reservations, units are moved with guarded updates, and every unit moved has its ledger row.
A checkout's reservations are in ``inventory.reserve``; new products and sale windows in ``inventory.catalogue``.
"""

from django.contrib.auth.models import User
from django.db import transaction

from inventory.buckets import lock_all_buckets, move_between_buckets, spread, spread_evenly
from inventory.exceptions import ProductNotFound, StaleStockVersion, StockWouldGoNegative
from inventory.models import Inventory, InventoryStrategy, Product, StockBucket, StockMovement
from skincare.db import retry_transient
from skincare.errors import InvalidInput

Reason = StockMovement.Reason


def _bucket_count(*, product_id: int) -> int:
    found = Product.objects.filter(pk=product_id).values_list("stock_buckets", flat=True).first()
    if found is None:
        raise ProductNotFound(product_id=product_id)
    return found


@retry_transient
@transaction.atomic
def stock_adjust(
    *, product_id: int, delta: int, note: str, actor: User | None = None, reason: str = Reason.ADJUSTMENT
) -> Inventory:
    """Add ``delta`` (may be negative) to available stock. Refused if the result would be negative. The product's
    stock rows are locked first and changed with F-expressions, so concurrent checkouts keep their reservations:
    nothing is overwritten. On a bucketed product the units are spread over its buckets (one ledger row each)."""
    if reason not in (Reason.ADJUSTMENT, Reason.RESTOCK):
        raise ValueError(f"stock_adjust cannot record reason {reason!r}")
    if not note or not note.strip():
        raise ValueError("a stock adjustment needs a reason note")
    if delta == 0:
        raise ValueError("a stock adjustment needs a non-zero delta")
    bucket_count = _bucket_count(product_id=product_id)
    available = lock_all_buckets(product_id=product_id)
    if sum(available.values()) + delta < 0:
        raise StockWouldGoNegative(product_id=product_id, requested=delta)
    moves = spread(available=available, bucket_count=bucket_count, delta=delta)
    move_between_buckets(product_id=product_id, moves=moves, reason=reason, actor=actor, note=note.strip())
    return Inventory.objects.get(product_id=product_id)


@retry_transient
@transaction.atomic
def stock_set_counted(
    *, product_id: int, counted: int, expected_version: int, note: str, actor: User | None = None
) -> Inventory:
    """Set available stock to a counted figure, but only if the product's stock is still at ``expected_version``
    (the version the ops form was loaded with). Otherwise raise :class:`StaleStockVersion` and write nothing."""
    if counted < 0:
        raise StockWouldGoNegative(product_id=product_id, requested=counted)
    if not note or not note.strip():
        raise ValueError("a stock count needs a reason note")
    bucket_count = _bucket_count(product_id=product_id)
    available = lock_all_buckets(product_id=product_id)
    inventory = Inventory.objects.get(product_id=product_id)  # read after the lock: the version is current
    if inventory.version != expected_version:
        raise StaleStockVersion(product_id=product_id, expected_version=expected_version, version=inventory.version)
    delta = counted - inventory.available_stock
    if delta == 0:
        return inventory
    moves = spread(available=available, bucket_count=bucket_count, delta=delta)
    move_between_buckets(product_id=product_id, moves=moves, reason=Reason.COUNT, actor=actor, note=note.strip())
    return Inventory.objects.get(product_id=product_id)


@retry_transient
@transaction.atomic
def stock_buckets_set(*, product_id: int, buckets: int, actor: User | None = None) -> Inventory:
    """Spread the product's units over ``buckets`` stock rows (1 = one row, as the seed has it). Every unit is kept:
    the available units are moved (``rebalance`` ledger rows) so that buckets 0..K-1 hold them evenly and rows at or
    above K hold none; reserved units stay in the bucket that holds them until their reservation ends. Only the
    ``guarded_update`` strategy can have more than one bucket (InvalidInput otherwise). Safe during a sale: the
    product's rows are locked while the units move, and a checkout reads K with its quote."""
    if not 1 <= buckets <= 64:
        raise InvalidInput("Stock buckets must be 1 to 64.", fields={"stock_buckets": ["1 to 64."]})
    product = Product.objects.select_for_update(no_key=True).filter(pk=product_id).first()
    if product is None:
        raise ProductNotFound(product_id=product_id)
    if buckets > 1 and product.inventory_strategy != InventoryStrategy.GUARDED_UPDATE:
        raise InvalidInput(
            "Stock buckets work with the guarded_update strategy only.",
            fields={"stock_buckets": [f"{product.inventory_strategy} products have one stock row."]},
        )
    StockBucket.objects.bulk_create(
        [StockBucket(product_id=product_id, bucket=b) for b in range(buckets)],
        ignore_conflicts=True,  # rows that exist keep their counters
    )
    available = lock_all_buckets(product_id=product_id)
    moves = spread_evenly(available=available, bucket_count=buckets, total=sum(available.values()))
    move_between_buckets(
        product_id=product_id, moves=moves, reason=Reason.REBALANCE, actor=actor, note=f"spread over {buckets} buckets"
    )
    Product.objects.filter(pk=product_id).update(stock_buckets=buckets)
    return Inventory.objects.get(product_id=product_id)
