"""A product's stock rows (buckets) and the stock ledger: the building blocks every stock write is made of.

A product's units live in its stock rows (``stock_buckets``): bucket 0 always; buckets 0..K-1 when its bucket count K
(``products.stock_buckets``) is above 1; and rows at or above K while units are left there by a lowered K
(docs/strategies.md#stock-buckets). Every change of a row's counters is a guarded UPDATE (:func:`guarded_update`, or
the reserve statement of ``inventory.reserve``) that re-checks its guard under the row lock, with its
``stock_movements`` rows (:func:`ledger_append`) in the same transaction. The writers: ``inventory.reserve`` (a
checkout's reservations and their release and consumption), ``inventory.services`` (ops writes) and
``inventory.catalogue`` (a new product's stock row).
"""

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now

from inventory.exceptions import StockWouldGoNegative
from inventory.models import StockBucket, StockMovement


class LedgerRow(NamedTuple):
    product_id: int
    available_delta: int
    reserved_delta: int
    order_id: int | None = None
    bucket: int = 0


def ledger_append(*, rows: Iterable[LedgerRow], reason: str, actor: User | None = None, note: str = "") -> None:
    """Append ledger rows: every stock change's, but a reservation's (the reserve statement of ``inventory.reserve``
    writes its row, naming the bucket it took)."""
    StockMovement.objects.bulk_create(
        [
            StockMovement(
                product_id=row.product_id,
                bucket=row.bucket,
                available_delta=row.available_delta,
                reserved_delta=row.reserved_delta,
                reason=reason,
                order_id=row.order_id,
                actor=actor,
                note=note,
            )
            for row in rows
        ]
    )


def guarded_update(*, product_id: int, bucket: int, guard: dict[str, Any], **changes: Any) -> int:
    """One UPDATE of one stock bucket, only where ``guard`` holds. Returns the number of rows changed."""
    return StockBucket.objects.filter(product_id=product_id, bucket=bucket, **guard).update(
        version=F("version") + 1, updated_at=Now(), **changes
    )


# Every stock row of one product, locked in bucket order (waiting): the full pass of a reservation, and every ops
# change (adjust, count, a new bucket count) takes the product's rows this way.
LOCK_ALL_BUCKETS_SQL = """
SELECT bucket, available_stock FROM stock_buckets
 WHERE product_id = %(product_id)s
 ORDER BY bucket
   FOR NO KEY UPDATE
"""


# How many stock rows the product has now: a fresh statement, so a fresh snapshot (no lock).
STOCK_ROWS_SQL = "SELECT count(*) FROM stock_buckets WHERE product_id = %(product_id)s"


def lock_all_buckets(*, product_id: int) -> dict[int, int]:
    """Lock every stock row of the product (ascending bucket); returns available stock by bucket.

    A statement that waited for a row lock reads the rows it found at their newest version, but finds only the rows
    its snapshot had: a new bucket count that committed while it waited added rows and moved units into them, and
    those units would be missed (a false sold-out in the full pass). So the rows are counted again by a fresh
    statement, and locked again while some are missing. Once every row is held, no other transaction can move a unit
    into a row added later: it would have to take it from one of ours."""
    params = {"product_id": product_id}
    with connection.cursor() as cursor:
        while True:
            cursor.execute(LOCK_ALL_BUCKETS_SQL, params)
            available = dict(cursor.fetchall())
            cursor.execute(STOCK_ROWS_SQL, params)
            if cursor.fetchone()[0] <= len(available):
                return available


def move_between_buckets(
    *, product_id: int, moves: Mapping[int, int], reason: str, actor: User | None, note: str
) -> None:
    """Apply per-bucket changes of ``available_stock`` (bucket → signed delta) to rows the caller has locked, each with
    its ledger row; a change that would go below zero raises (nothing is written: the transaction rolls back)."""
    changes = {bucket: delta for bucket, delta in sorted(moves.items()) if delta}
    ledger_append(
        rows=[LedgerRow(product_id, delta, 0, None, bucket) for bucket, delta in changes.items()],
        reason=reason,
        actor=actor,
        note=note,
    )
    for bucket, delta in changes.items():
        guard = {"available_stock__gte": -delta} if delta < 0 else {}
        if not guarded_update(
            product_id=product_id, bucket=bucket, guard=guard, available_stock=F("available_stock") + delta
        ):
            raise StockWouldGoNegative(product_id=product_id, requested=delta)


def spread(*, available: Mapping[int, int], bucket_count: int, delta: int) -> dict[int, int]:
    """Per-bucket changes that add ``delta`` units to a product (``available``: its locked rows by bucket). Units
    added are shared evenly by buckets 0..bucket_count-1 (the lower ones get the remainder); units removed come from
    the buckets holding the most first (the full pass takes its units this way too). The caller has checked that the
    rows can give ``-delta``."""
    if delta > 0:
        share, extra = divmod(delta, bucket_count)
        return {b: share + (1 if b < extra else 0) for b in range(bucket_count)}
    moves: dict[int, int] = {}
    remaining = -delta
    for bucket in sorted(available, key=lambda b: (-available[b], b)):
        take = min(available[bucket], remaining)
        if take:
            moves[bucket] = -take
            remaining -= take
    return moves


def spread_evenly(*, available: Mapping[int, int], bucket_count: int, total: int) -> dict[int, int]:
    """Per-bucket changes that leave ``total`` units spread evenly over buckets 0..bucket_count-1 (the lower buckets
    get the remainder) and none in the rows at or above ``bucket_count``."""
    share, extra = divmod(total, bucket_count)
    target = {b: share + (1 if b < extra else 0) for b in range(bucket_count)}
    return {b: target.get(b, 0) - available.get(b, 0) for b in sorted(set(available) | set(target))}
