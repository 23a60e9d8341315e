"""TEST-ONLY naive stock reservation, to show that the load tests catch an oversell. Never used by the product.

``naive_stock_reserve`` is the classic read-check-write: read the counter without a lock, decide in Python,
write the absolute value back. Two checkouts that read before either commits both "see" the last unit.
``bench/naive_gunicorn.conf.py`` installs it in each gunicorn worker; ``python -m bench loadtest --naive`` uses
that config.
"""

from django.db import transaction

from inventory import reserve
from inventory.buckets import LedgerRow, ledger_append
from inventory.exceptions import StockConflict
from inventory.models import Inventory, StockBucket, StockMovement


@transaction.atomic(savepoint=False)
def naive_stock_reserve(*, order_id, lines):
    for line in sorted(lines):
        available, reserved = Inventory.objects.filter(product_id=line.product_id).values_list(
            "available_stock", "reserved_stock"
        )[0]  # plain read: no FOR UPDATE, no guard
        if available < line.qty:
            raise StockConflict(product_ids=[line.product_id])
        # the reserve ledger row in bucket 0, the bucket the checkout's reservation names
        ledger_append(
            rows=[LedgerRow(line.product_id, -line.qty, line.qty, order_id, 0)], reason=StockMovement.Reason.RESERVE
        )
        StockBucket.objects.filter(product_id=line.product_id, bucket=0).update(
            available_stock=available - line.qty, reserved_stock=reserved + line.qty
        )  # absolute write of what was read


def install():
    reserve.stock_reserve = naive_stock_reserve
