"""Every write to stock counters goes through this module.

Each function changes ``available_stock``/``reserved_stock`` with a guarded update (``WHERE available_stock >= q``
and the like: the database re-checks the guard under the row lock) and writes one ``stock_movements`` row per
product in the same transaction. Ledger rows are written here by :func:`_ledger`, except a checkout's reserve rows,
which the checkout's one INSERT statement writes (``payments.checkout``) before it calls :func:`stock_reserve`.
Rows are locked in ascending ``product_id`` order, as the last statements before COMMIT (the lock order is in
``skincare.locks``). The building blocks used inside a checkout or an order transition run with
``savepoint=False``: they join the caller's transaction without SAVEPOINT/RELEASE round trips, and a failure aborts
that whole transaction.
"""

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth.models import User
from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from inventory import soldout
from inventory.exceptions import (
    InventoryCorrupted,
    LockBusy,
    ProductNotFound,
    StaleStockVersion,
    StockConflict,
    StockWouldGoNegative,
)
from inventory.models import Inventory, InventoryStrategy, Product, StockBucket, StockMovement
from skincare.db import RetryTransaction, sqlstate
from skincare.errors import InvalidInput
from skincare.locks import advisory_xact_lock, require_transaction

Reason = StockMovement.Reason


class LedgerRow(NamedTuple):
    product_id: int
    available_delta: int
    reserved_delta: int
    order_id: int | None = None
    bucket: int = 0


# (order_id, product_id, qty): one order's units of one product, as reservations hold them.
OrderLineQty = tuple[int, int, int]


def _ledger(*, rows: Iterable[LedgerRow], reason: str, actor: User | None = None, note: str = "") -> None:
    """Append ledger rows (every stock change's, but a checkout's reserve rows: see the module docstring)."""
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


def _guarded_update(*, product_id: int, bucket: int, guard: dict[str, Any], **changes: Any) -> int:
    """One UPDATE of one stock bucket, only where ``guard`` holds. Returns the number of rows changed."""
    return StockBucket.objects.filter(product_id=product_id, bucket=bucket, **guard).update(
        version=F("version") + 1, updated_at=Now(), **changes
    )


# A reservation from bucket 0, the product's only stock row unless it is bucketed: the guarded UPDATE every inventory
# strategy ends with. PostgreSQL re-checks ``available_stock >= qty`` on the newest row version once it holds the row
# lock, so two buyers cannot both take the last unit. (The checkout's own statement wrote the reserve ledger row.)
RESERVE_SQL = """
UPDATE stock_buckets
   SET available_stock = available_stock - %(qty)s,
       reserved_stock = reserved_stock + %(qty)s,
       version = version + 1,
       updated_at = statement_timestamp()
 WHERE product_id = %(product_id)s AND bucket = 0
   AND available_stock >= %(qty)s
"""
# The optimistic strategy's reservation: the same, only while the row is still at the version the checkout read.
RESERVE_AT_VERSION_SQL = RESERVE_SQL + "   AND version = %(version)s\n"

# A bucketed product (stock_buckets = K > 1): take the units from a bucket below K that has them and that no other
# transaction holds (SKIP LOCKED: never wait), chosen at random so that concurrent checkouts spread over the buckets,
# and write the reserve ledger row naming that bucket, in one statement. No row back: every free bucket was short or
# held by someone else, and CLAIM_WAITING_SQL follows.
CLAIM_BUCKET_SQL = """
WITH free AS (
    SELECT bucket FROM stock_buckets
     WHERE product_id = %(product_id)s AND bucket < %(buckets)s AND available_stock >= %(qty)s
     ORDER BY random() LIMIT 1
       FOR NO KEY UPDATE SKIP LOCKED
), taken AS (
    UPDATE stock_buckets s
       SET available_stock = s.available_stock - %(qty)s,
           reserved_stock = s.reserved_stock + %(qty)s,
           version = s.version + 1,
           updated_at = statement_timestamp()
      FROM free
     WHERE s.product_id = %(product_id)s AND s.bucket = free.bucket AND s.available_stock >= %(qty)s
    RETURNING s.bucket
)
INSERT INTO stock_movements (product_id, bucket, available_delta, reserved_delta, reason, order_id, note, created_at)
SELECT %(product_id)s, taken.bucket, -%(qty)s, %(qty)s, %(reason)s, %(order_id)s, '', statement_timestamp()
  FROM taken
RETURNING bucket
"""
# The waiting pass of a bucketed product: the same, but it waits for ONE bucket that had the units in its snapshot
# (picked at random, so waiters spread over the buckets too, and never holding one bucket while waiting for another
# of the same product). No row back: that bucket ran short while we waited.
CLAIM_WAITING_SQL = """
WITH pick AS (
    SELECT bucket FROM stock_buckets
     WHERE product_id = %(product_id)s AND bucket < %(buckets)s AND available_stock >= %(qty)s
     ORDER BY random() LIMIT 1
), taken AS (
    UPDATE stock_buckets s
       SET available_stock = s.available_stock - %(qty)s,
           reserved_stock = s.reserved_stock + %(qty)s,
           version = s.version + 1,
           updated_at = statement_timestamp()
      FROM pick
     WHERE s.product_id = %(product_id)s AND s.bucket = pick.bucket AND s.available_stock >= %(qty)s
    RETURNING s.bucket
)
INSERT INTO stock_movements (product_id, bucket, available_delta, reserved_delta, reason, order_id, note, created_at)
SELECT %(product_id)s, taken.bucket, -%(qty)s, %(qty)s, %(reason)s, %(order_id)s, '', statement_timestamp()
  FROM taken
RETURNING bucket
"""
# Waiting passes of a bucketed product before the full pass (each one waits for one bucket at most).
WAITING_PASSES = 2


class ReserveLine(NamedTuple):
    """One product of a reservation, with what the checkout read about it: ``strategy``, the ``version`` seen (for an
    optimistic product), ``buckets`` (the product's stock_buckets, K) and ``bucket_rows`` (its stock rows; more than K
    when K was lowered)."""

    product_id: int
    qty: int
    strategy: str = InventoryStrategy.GUARDED_UPDATE
    version: int | None = None
    buckets: int = 1
    bucket_rows: int = 1


def _lock_rows(*, product_ids: list[int], nowait: bool) -> dict[int, int]:
    """``SELECT … FOR NO KEY UPDATE [NOWAIT]`` of the products' bucket-0 rows, ascending; returns available stock by
    id. With NOWAIT a row that another transaction holds is :class:`LockBusy` (409) at once instead of a wait."""
    rows = (
        StockBucket.objects.select_for_update(no_key=True, nowait=nowait)
        .filter(product_id__in=product_ids, bucket=0)
        .order_by("product_id")
        .values_list("product_id", "available_stock")
    )
    if not nowait:
        return dict(rows)
    try:
        return dict(rows)
    except OperationalError as exc:
        if sqlstate(exc) == "55P03":
            raise LockBusy(product_ids=product_ids) from exc
        raise


def _refuse_short(*, lines: Sequence[ReserveLine], available: Mapping[int, int]) -> None:
    short = [line.product_id for line in lines if available.get(line.product_id, 0) < line.qty]
    for pid in short:
        soldout.remember_short(pid, available_at_most=available.get(pid, 0))
    if short:
        raise StockConflict(product_ids=short)


def _guarded_reserve(line: ReserveLine, *, order_id: int) -> None:
    """The step every strategy ends with: the guarded UPDATE of bucket 0 (at the version seen, for an optimistic
    product). A product with more stock rows than bucket 0 (its K was lowered) is refused only after the full pass."""
    params: dict[str, Any] = {"product_id": line.product_id, "qty": line.qty}
    optimistic = line.strategy == InventoryStrategy.OPTIMISTIC and line.version is not None
    if optimistic:
        params["version"] = line.version
    with connection.cursor() as cursor:
        cursor.execute(RESERVE_AT_VERSION_SQL if optimistic else RESERVE_SQL, params)
        changed = cursor.rowcount
    if changed:
        return
    if line.bucket_rows > 1:
        _reserve_from_all(line, order_id=order_id, ledger_written=True)
        return
    if optimistic:
        # Either the stock ran out or someone changed the row since we read it: let the runner try again from
        # the start (a fresh read decides which); after the bound the customer gets 409 stock_conflict.
        raise RetryTransaction(
            "optimistic version check lost",
            give_up=StockConflict(product_ids=[line.product_id], gave_up_after=settings.INVENTORY_OPTIMISTIC_ATTEMPTS),
            max_attempts=settings.INVENTORY_OPTIMISTIC_ATTEMPTS,
        )
    soldout.remember_short(line.product_id, available_at_most=line.qty - 1)
    raise StockConflict(product_ids=[line.product_id])


def _reserve_bucketed(line: ReserveLine, *, order_id: int) -> None:
    """A bucketed product (docs/strategies.md#stock-buckets): a free bucket without waiting; else wait for one bucket
    that had the units; else the full pass, which refuses only when the product really lacks them.

    Each attempt runs after a savepoint, rolled back when it comes back empty. A statement that found a row changed
    since its snapshot locks the row's newest version before it re-checks it, and keeps that lock even when the
    re-check fails; rolling back to the savepoint lets go of it, so the next attempt (and the full pass, which takes
    the buckets in order) waits while holding no bucket of this product: no deadlock (docs/locking.md). The
    SAVEPOINT is sent before the claim, so it does not lengthen the time a bucket is held."""
    params: dict[str, Any] = {
        "product_id": line.product_id,
        "qty": line.qty,
        "buckets": line.buckets,
        "order_id": order_id,
        "reason": Reason.RESERVE.value,
    }
    for sql in (CLAIM_BUCKET_SQL, *[CLAIM_WAITING_SQL] * WAITING_PASSES):
        attempt = transaction.savepoint()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            claimed = cursor.fetchone() is not None
        if claimed:
            return  # the savepoint is released by COMMIT: a RELEASE would be a round trip while the bucket is held
        transaction.savepoint_rollback(attempt)
    _reserve_from_all(line, order_id=order_id, ledger_written=False)


# Every stock row of one product, locked in bucket order (waiting): the full pass of a reservation, and every ops
# change (adjust, count, a new number of buckets) takes the product's rows this way.
LOCK_ALL_BUCKETS_SQL = """
SELECT bucket, available_stock FROM stock_buckets
 WHERE product_id = %(product_id)s
 ORDER BY bucket
   FOR NO KEY UPDATE
"""


def _lock_all_buckets(*, product_id: int) -> dict[int, int]:
    """Lock every stock row of the product (ascending bucket); returns available stock by bucket."""
    with connection.cursor() as cursor:
        cursor.execute(LOCK_ALL_BUCKETS_SQL, {"product_id": product_id})
        return dict(cursor.fetchall())


def _move_between_buckets(
    *, product_id: int, moves: Mapping[int, int], reason: str, actor: User | None, note: str
) -> None:
    """Apply per-bucket changes of ``available_stock`` (bucket → signed delta) to rows the caller has locked, each with
    its ledger row; a change that would go below zero raises (nothing is written: the transaction rolls back)."""
    changes = {bucket: delta for bucket, delta in sorted(moves.items()) if delta}
    _ledger(
        rows=[LedgerRow(product_id, delta, 0, None, bucket) for bucket, delta in changes.items()],
        reason=reason,
        actor=actor,
        note=note,
    )
    for bucket, delta in changes.items():
        guard = {"available_stock__gte": -delta} if delta < 0 else {}
        if not _guarded_update(
            product_id=product_id, bucket=bucket, guard=guard, available_stock=F("available_stock") + delta
        ):
            raise StockWouldGoNegative(product_id=product_id, requested=delta)


def _reserve_from_all(line: ReserveLine, *, order_id: int, ledger_written: bool) -> None:
    """The full pass: lock every stock row of the product (ascending), refuse if their total is short (a true
    sold-out), else move units into one bucket below K (``rebalance`` ledger rows) and reserve there.
    ``ledger_written``: the reserve ledger row (bucket 0) was written by the checkout's statement already."""
    available = _lock_all_buckets(product_id=line.product_id)
    total = sum(available.values())
    if total < line.qty:
        soldout.remember_short(line.product_id, available_at_most=total)
        raise StockConflict(product_ids=[line.product_id])
    # Bucket 0 when the checkout's ledger row names it; otherwise the active bucket holding the most.
    target = 0 if ledger_written else max(range(line.buckets), key=lambda b: (available.get(b, 0), -b))
    need = line.qty - available.get(target, 0)
    moves: dict[int, int] = {}
    for bucket in sorted((b for b in available if b != target), key=lambda b: -available[b]):
        if need <= 0:
            break
        take = min(available[bucket], need)
        if take:
            moves[bucket] = -take
            moves[target] = moves.get(target, 0) + take
            need -= take
    _move_between_buckets(
        product_id=line.product_id, moves=moves, reason=Reason.REBALANCE, actor=None, note="units for a checkout"
    )
    if not ledger_written:
        _ledger(rows=[LedgerRow(line.product_id, -line.qty, line.qty, order_id, target)], reason=Reason.RESERVE)
    changed = _guarded_update(
        product_id=line.product_id,
        bucket=target,
        guard={"available_stock__gte": line.qty},
        available_stock=F("available_stock") - line.qty,
        reserved_stock=F("reserved_stock") + line.qty,
    )
    if not changed:  # the rows are locked and the units were moved: only corruption gets here
        raise InventoryCorrupted(product_ids=[line.product_id])


@transaction.atomic(savepoint=False)
def stock_reserve(*, order_id: int, lines: Sequence[ReserveLine]) -> None:
    """Move units from available to reserved for ``order_id``, one :class:`ReserveLine` per product, each by its
    product's strategy (docs/strategies.md):

    * ``guarded_update``, ``serializable``: the guarded UPDATE alone (the caller runs ``serializable`` at that
      isolation level); a bucketed product (``stock_buckets`` > 1, guarded_update only) claims a bucket instead;
    * ``row_lock`` / ``row_lock_nowait``: ``SELECT … FOR NO KEY UPDATE`` (``NOWAIT``: 409 ``lock_busy`` if busy),
      then the guarded UPDATE;
    * ``optimistic``: the guarded UPDATE with ``version = <seen>``; a lost race reruns the transaction;
    * ``advisory``: ``pg_advisory_xact_lock`` on the product's key, then the guarded UPDATE.

    Several products (the cart rule): advisory keys of the cart's advisory products (ascending); then, when every
    product has one stock row, every row locked in ascending id with ``FOR NO KEY UPDATE`` (``NOWAIT`` if any
    product is ``row_lock_nowait``) and the guarded UPDATEs; a cart with a bucketed product reserves product by
    product, ascending, each by its own rule. The version check is not used in a cart.

    The caller has written the reserve ledger rows of one-row products in this transaction already (a bucketed
    product's row is written with its claim, naming the bucket), so the stock row locks are taken by the last
    statements before COMMIT. Raises :class:`StockConflict` naming the product that is short; the caller's
    transaction (ledger rows included) then rolls back.
    """
    require_transaction()
    lines = sorted(lines)
    advisory = [line.product_id for line in lines if line.strategy == InventoryStrategy.ADVISORY]
    if advisory:
        advisory_xact_lock(space="inventory_product", idents=advisory)
    one_row = all(line.buckets == 1 and line.bucket_rows == 1 for line in lines)
    if len(lines) > 1 and one_row:
        # Several rows: lock them all in ascending id order first, so that no two checkouts can each hold
        # one row the other needs, and so that the conflict can name every short product.
        nowait = any(line.strategy == InventoryStrategy.ROW_LOCK_NOWAIT for line in lines)
        _refuse_short(lines=lines, available=_lock_rows(product_ids=[line.product_id for line in lines], nowait=nowait))
        for line in lines:
            _guarded_reserve(line._replace(version=None), order_id=order_id)
        return
    for line in lines:  # ascending product id
        if len(lines) > 1:
            line = line._replace(version=None)
        if line.buckets > 1:
            _reserve_bucketed(line, order_id=order_id)
            continue
        if line.strategy in (InventoryStrategy.ROW_LOCK, InventoryStrategy.ROW_LOCK_NOWAIT):
            available = _lock_rows(
                product_ids=[line.product_id], nowait=line.strategy == InventoryStrategy.ROW_LOCK_NOWAIT
            )
            if line.bucket_rows == 1:
                _refuse_short(lines=[line], available=available)
        # For the other strategies this guarded UPDATE is the whole protection: it takes the row lock and re-checks
        # available_stock (and, optimistic, the version) under it.
        _guarded_reserve(line, order_id=order_id)


# Where each reservation of these orders holds its units: the bucket its reserve ledger row names.
RESERVED_BUCKETS_SQL = """
SELECT order_id, product_id, bucket FROM stock_movements
 WHERE order_id = ANY(%(order_ids)s) AND reason = %(reserve)s
"""


def _reserved_buckets(*, order_ids: list[int]) -> dict[tuple[int, int], int]:
    with connection.cursor() as cursor:
        cursor.execute(RESERVED_BUCKETS_SQL, {"order_ids": order_ids, "reserve": Reason.RESERVE.value})
        return {(order_id, product_id): bucket for order_id, product_id, bucket in cursor.fetchall()}


def _move_reserved(*, lines: Sequence[OrderLineQty], reason: str, back_to_available: bool) -> None:
    """Take units out of ``reserved_stock`` (and back into ``available_stock`` when ``back_to_available``), in the
    bucket that holds each reservation. ``lines`` are (order_id, product_id, qty): one summed guarded update per
    (product, bucket), ascending, and one ledger row per line so that every unit stays traceable to its order."""
    require_transaction()
    held_in = _reserved_buckets(order_ids=sorted({order_id for order_id, _, _ in lines}))
    placed = sorted(
        (product_id, held_in.get((order_id, product_id), 0), order_id, qty) for order_id, product_id, qty in lines
    )
    totals: dict[tuple[int, int], int] = {}
    for product_id, bucket, _order_id, qty in placed:
        totals[(product_id, bucket)] = totals.get((product_id, bucket), 0) + qty
    # Ledger first, counters last (as in stock_reserve): the stock row locks are then held only for the
    # guarded updates and the COMMIT. A failed guard raises and rolls the ledger rows back with everything else.
    _ledger(
        rows=[
            LedgerRow(product_id, qty if back_to_available else 0, -qty, order_id, bucket)
            for product_id, bucket, order_id, qty in placed
        ],
        reason=reason,
    )
    for (product_id, bucket), qty in sorted(totals.items()):
        changes: dict[str, Any] = {"reserved_stock": F("reserved_stock") - qty}
        if back_to_available:
            changes["available_stock"] = F("available_stock") + qty
        if not _guarded_update(product_id=product_id, bucket=bucket, guard={"reserved_stock__gte": qty}, **changes):
            raise InventoryCorrupted(product_ids=[product_id])


@transaction.atomic(savepoint=False)
def stock_release(*, lines: Sequence[OrderLineQty], reason: str) -> None:
    """Return reserved units to available (reservations expired or cancelled)."""
    if reason not in (Reason.EXPIRE, Reason.CANCEL):
        raise ValueError(f"stock_release cannot record reason {reason!r}")
    _move_reserved(lines=lines, reason=reason, back_to_available=True)


@transaction.atomic(savepoint=False)
def stock_consume(*, lines: Sequence[OrderLineQty]) -> None:
    """Reserved units leave the shop: their orders were paid."""
    _move_reserved(lines=lines, reason=Reason.CONSUME, back_to_available=False)


def _spread(*, available: Mapping[int, int], buckets: int, delta: int) -> dict[int, int]:
    """Per-bucket changes that add ``delta`` units to a product (``available``: its locked rows by bucket). Units
    added are shared evenly by buckets 0..buckets-1 (the lower ones get the remainder); units removed come from the
    buckets holding the most first. The caller has checked that the total can give ``-delta``."""
    if delta > 0:
        share, extra = divmod(delta, buckets)
        return {b: share + (1 if b < extra else 0) for b in range(buckets)}
    moves: dict[int, int] = {}
    remaining = -delta
    for bucket in sorted(available, key=lambda b: (-available[b], b)):
        take = min(available[bucket], remaining)
        if take:
            moves[bucket] = -take
            remaining -= take
    return moves


def _spread_evenly(*, available: Mapping[int, int], buckets: int, total: int) -> dict[int, int]:
    """Per-bucket changes that leave ``total`` units spread evenly over buckets 0..buckets-1 (the lower buckets get
    the remainder) and none in the rows at or above ``buckets``."""
    share, extra = divmod(total, buckets)
    target = {b: share + (1 if b < extra else 0) for b in range(buckets)}
    return {b: target.get(b, 0) - available.get(b, 0) for b in sorted(set(available) | set(target))}


def _product_buckets(*, product_id: int) -> int:
    found = Product.objects.filter(pk=product_id).values_list("stock_buckets", flat=True).first()
    if found is None:
        raise ProductNotFound(product_id=product_id)
    return found


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
    buckets = _product_buckets(product_id=product_id)
    available = _lock_all_buckets(product_id=product_id)
    if sum(available.values()) + delta < 0:
        raise StockWouldGoNegative(product_id=product_id, requested=delta)
    moves = _spread(available=available, buckets=buckets, delta=delta)
    _move_between_buckets(product_id=product_id, moves=moves, reason=reason, actor=actor, note=note.strip())
    return Inventory.objects.get(product_id=product_id)


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
    buckets = _product_buckets(product_id=product_id)
    available = _lock_all_buckets(product_id=product_id)
    inventory = Inventory.objects.get(product_id=product_id)  # read after the lock: the version is current
    if inventory.version != expected_version:
        raise StaleStockVersion(product_id=product_id, expected_version=expected_version, version=inventory.version)
    delta = counted - inventory.available_stock
    if delta == 0:
        return inventory
    moves = _spread(available=available, buckets=buckets, delta=delta)
    _move_between_buckets(product_id=product_id, moves=moves, reason=Reason.COUNT, actor=actor, note=note.strip())
    return Inventory.objects.get(product_id=product_id)


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
    available = _lock_all_buckets(product_id=product_id)
    moves = _spread_evenly(available=available, buckets=buckets, total=sum(available.values()))
    _move_between_buckets(
        product_id=product_id, moves=moves, reason=Reason.REBALANCE, actor=actor, note=f"spread over {buckets} buckets"
    )
    Product.objects.filter(pk=product_id).update(stock_buckets=buckets)
    return Inventory.objects.get(product_id=product_id)


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
    ``max_per_customer`` caps the units one customer may hold (None = no limit). ``stock_buckets_set`` spreads it."""
    if initial_stock < 0:
        raise StockWouldGoNegative(product_id=None, requested=initial_stock)
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
        _ledger(
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
    if sale_price is not None and sale_price < 0:
        problems.append("the sale price must not be negative")
    if sale_price is not None and starts_at is None and ends_at is None:
        problems.append("a sale price needs a sale window (a start, an end or both)")
    if max_per_customer is not None and max_per_customer < 1:
        problems.append("max_per_customer must be at least 1 (or empty for no limit)")
    if problems:
        raise InvalidInput("; ".join(problems).capitalize() + ".", fields={"sale": problems})
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
