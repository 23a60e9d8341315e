"""TEST-ONLY naive stock reservation, to show that the load tests catch an oversell. Never used by the product.

``naive_stock_reserve`` is the classic read-check-write: read the counter without a lock, decide in Python,
write the absolute value back. Two checkouts that read before either commits both "see" the last unit.
``bench/naive_gunicorn.conf.py`` installs it in each gunicorn worker; ``python -m bench.loadtest --naive`` uses
that config.
"""

from django.db import transaction

from inventory import services
from inventory.exceptions import StockConflict
from inventory.models import Inventory, StockBucket


@transaction.atomic(savepoint=False)
def naive_stock_reserve(*, quantities, order_id, quotes=None):
    for product_id in sorted(quantities):
        qty = quantities[product_id]
        available, reserved = Inventory.objects.filter(product_id=product_id).values_list(
            "available_stock", "reserved_stock"
        )[0]  # plain read: no FOR UPDATE, no guard
        if available < qty:
            raise StockConflict(product_ids=[product_id])
        StockBucket.objects.filter(product_id=product_id, bucket=0).update(
            available_stock=available - qty, reserved_stock=reserved + qty
        )  # absolute write of what was read (the reserve ledger rows were written with the order, as always)


def install():
    services.stock_reserve = naive_stock_reserve
