"""A checkout's reservations: units move from available to reserved (:func:`stock_reserve`), and back
(:func:`stock_release`) or out of the shop (:func:`stock_consume`) when the reservation ends.

:func:`stock_reserve` runs a plan made without the database (``inventory.plan``). Its concepts:

1. **the lines**: each product of the order, its quantity, and what the checkout's quote read about it (its
   strategy, version, bucket count K and stock rows);
2. **the plan**: the advisory keys, then the steps in ascending product id (``inventory.plan.plan_reservation``,
   which reads the strategies as data, ``inventory.strategies``);
3. **the advisory keys** of ``advisory`` products (lock order step 7), taken first;
4. **a lock step**: bucket-0 rows locked in one statement (:func:`lock_rows`), the short ones refused;
5. **the reserve statement**: every reservation is one statement built from :data:`_RESERVE_TEMPLATE`, the guarded
   UPDATE of one stock row, its reserve ledger row, and the bucket it took named on the reservation: on bucket 0
   (:data:`RESERVE_SQL`, :data:`RESERVE_AT_VERSION_SQL`), or a bucketed product's claims (:data:`CLAIM_BUCKET_SQL`,
   :data:`CLAIM_WAITING_SQL`);
6. **the full pass** (:func:`_reserve_from_all`): every stock row of the product in bucket order, refused only when
   their total is short;
7. **bucket 0 short** (:func:`_bucket_0_short`, the one place that asks whether K was raised since the quote read):
   a refusal, or, when the product has other stock rows now, the full pass or a run of the transaction again;
8. **a restart** (``skincare.db.RestartTransaction``): the transaction runs again from the start, with a fresh quote.

Release and consumption take the units from the bucket the reservation names (:class:`ReservedUnits`); a
reservation without one, or whose bucket does not hold its units, is :class:`InventoryCorrupted`.

Stock rows are lock order step 8 (docs/locking.md), advisory keys step 7. These functions run inside the caller's
transaction with ``savepoint=False``: no SAVEPOINT/RELEASE round trips, and a failure aborts the whole transaction.
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import F

from inventory import soldout
from inventory.buckets import LedgerRow, guarded_update, ledger_append, lock_all_buckets, move_between_buckets, spread
from inventory.exceptions import InventoryCorrupted, LockBusy, StockConflict
from inventory.models import StockBucket, StockMovement
from inventory.plan import Claim, LockRows, Reserve, ReserveLine, Statement, plan_reservation
from skincare.db import RestartTransaction, sqlstate
from skincare.locks import advisory_xact_lock, require_transaction

Reason = StockMovement.Reason


# The one statement that reserves units for a reservation, and the only writer of reserve ledger rows: it takes
# ``qty`` units from the stock row ``pick`` names (a fixed bucket, or a bucket chosen by a sub-select), writes the
# reserve ledger row naming that bucket and, when the reservation names another bucket
# (``orders.services.ORDER_ROWS_SQL`` writes every reservation with bucket 0), names the bucket it took on the
# reservation: all in one round trip, so the stock row lock is still taken by the last statement before COMMIT. ``guard`` adds a condition to the guarded UPDATE.
# PostgreSQL re-checks ``available_stock >= qty`` on the newest row version once it holds the row lock, so two
# buyers cannot both take the last unit. Returns the bucket taken; no row: nothing was taken (short, or the guard
# failed), and nothing was written.
# (The reservation belongs to orders; its bucket is written here because the bucket is known only once this
# statement holds it, a second statement would lengthen the time a hot stock row is locked, and inventory cannot
# call orders. Every other write of a reservation is orders'.)
_RESERVE_TEMPLATE = """
WITH pick AS (
    {pick}
), taken AS (
    UPDATE stock_buckets
       SET available_stock = available_stock - %(qty)s,
           reserved_stock = reserved_stock + %(qty)s,
           version = version + 1,
           updated_at = statement_timestamp()
      FROM pick
     WHERE product_id = %(product_id)s AND stock_buckets.bucket = pick.bucket
       AND available_stock >= %(qty)s{guard}
    RETURNING stock_buckets.bucket
), ledger AS (
    INSERT INTO stock_movements (product_id, bucket, available_delta, reserved_delta, reason, order_id, note,
                                 created_at)
    SELECT %(product_id)s, taken.bucket, -%(qty)s, %(qty)s, '{reserve}', %(order_id)s, '', statement_timestamp()
      FROM taken
), named AS (
    UPDATE inventory_reservations r SET bucket = taken.bucket
      FROM taken
     WHERE r.order_id = %(order_id)s AND r.product_id = %(product_id)s AND r.bucket <> taken.bucket
)
SELECT bucket FROM taken
"""


def _reserve_statement(*, pick: str, guard: str = "") -> str:
    return _RESERVE_TEMPLATE.format(pick=pick.strip(), guard=guard, reserve=Reason.RESERVE.value)


# A reservation from one named stock row (``bucket``): bucket 0 for a one-row product (what every inventory strategy
# ends with), or the full pass's target bucket.
RESERVE_SQL = _reserve_statement(pick="SELECT %(bucket)s::smallint AS bucket")
# The optimistic strategy's reservation: the same, only while the row is still at the version the checkout read.
RESERVE_AT_VERSION_SQL = _reserve_statement(
    pick="SELECT %(bucket)s::smallint AS bucket", guard="\n       AND version = %(version)s"
)

# A bucketed product (bucket count K > 1): a bucket below K that has the units, the order's own bucket first (its id
# mod K), then the next ones round the ring. The claim takes the first that no other transaction holds (SKIP LOCKED:
# never waits; no row back: every bucket with the units was held by someone else or short, and the waiting claim
# follows). The waiting claim waits for ONE bucket, the first round the ring from the order's that had the units in
# its snapshot: concurrent checkouts hold consecutive order ids, so N waiters queue N/K to a bucket, each queue first
# come first served, and none holds one bucket of a product while it waits for another of it (no row back: that
# bucket ran short while we waited). The lock clause is the only difference between the two. Measured against a
# random bucket and other claims: docs/benchmarks.md#decisions.
# mod() rather than %: in a psycopg statement % starts a parameter.
_CLAIM_PICK = """
SELECT bucket FROM stock_buckets
     WHERE product_id = %(product_id)s AND bucket < %(bucket_count)s AND available_stock >= %(qty)s
     ORDER BY mod(bucket + %(bucket_count)s - mod(%(order_id)s, %(bucket_count)s), %(bucket_count)s) LIMIT 1{lock}
"""
CLAIM_BUCKET_SQL = _reserve_statement(pick=_CLAIM_PICK.format(lock="\n       FOR NO KEY UPDATE SKIP LOCKED"))
CLAIM_WAITING_SQL = _reserve_statement(pick=_CLAIM_PICK.format(lock=""))


def _reserve_in(sql: str, line: ReserveLine, *, order_id: int, **params: Any) -> int | None:
    """Run one reserve statement (:func:`_reserve_statement`) for ``line``; the bucket it took, or None."""
    with connection.cursor() as cursor:
        cursor.execute(sql, {"product_id": line.product_id, "qty": line.qty, "order_id": order_id, **params})
        row = cursor.fetchone()
    return None if row is None else row[0]


@transaction.atomic(savepoint=False)
def stock_reserve(*, order_id: int, lines: Sequence[ReserveLine]) -> None:
    """Move units from available to reserved for ``order_id``, one :class:`ReserveLine` per product: the plan
    (``inventory.plan.plan_reservation``), run step by step. The stock row locks are taken by the last statements
    before COMMIT. Raises :class:`StockConflict` naming the products that are short (the caller's transaction then
    rolls back), or ``RestartTransaction`` when the whole transaction must run again."""
    require_transaction()
    plan = plan_reservation(lines)
    if plan.advisory_keys:
        advisory_xact_lock(space="inventory_product", idents=plan.advisory_keys)
    for step in plan.steps:
        if isinstance(step, LockRows):
            _lock_bucket_0(step, order_id=order_id)
        elif isinstance(step, Reserve):
            _reserve_bucket_0(step, order_id=order_id)
        else:
            _reserve_bucketed(step, order_id=order_id)


def _statement(statement: Statement) -> str:
    """The SQL of a planned statement: the module's constant, read when it runs."""
    return {
        Statement.RESERVE: RESERVE_SQL,
        Statement.RESERVE_AT_VERSION: RESERVE_AT_VERSION_SQL,
        Statement.CLAIM_BUCKET: CLAIM_BUCKET_SQL,
        Statement.CLAIM_WAITING: CLAIM_WAITING_SQL,
    }[statement]


def _lock_bucket_0(step: LockRows, *, order_id: int) -> None:
    """A lock step: the rows locked (:func:`lock_rows`), then the lines to refuse whose locked row is short."""
    available = lock_rows(product_ids=list(step.product_ids), nowait=step.nowait)
    short = [line for line in step.refuse if available.get(line.product_id, 0) < line.qty]
    if short:
        at_most = {line.product_id: available.get(line.product_id, 0) for line in short}
        _bucket_0_short(short, available_at_most=at_most, order_id=order_id, full_pass=False)


def _reserve_bucket_0(step: Reserve, *, order_id: int) -> None:
    """The guarded update on bucket 0 (at the version seen, when planned so). For the strategies without a lock step
    it is the whole protection: it takes the row lock and re-checks the stock (and the version) under it."""
    line = step.line
    params: dict[str, Any] = {"bucket": 0}
    if step.statement is Statement.RESERVE_AT_VERSION:
        params["version"] = line.version
    if _reserve_in(_statement(step.statement), line, order_id=order_id, **params) is not None:
        return
    if step.restart_when_lost:
        # Either the stock ran out or someone changed the row since we read it: the runner tries again from the
        # start (a fresh read decides which); after the bound the customer gets 409 stock_conflict.
        raise RestartTransaction(
            "optimistic version check lost",
            give_up=StockConflict(product_ids=[line.product_id], gave_up_after=settings.INVENTORY_OPTIMISTIC_ATTEMPTS),
            max_attempts=settings.INVENTORY_OPTIMISTIC_ATTEMPTS,
        )
    _bucket_0_short([line], available_at_most={line.product_id: line.qty - 1}, order_id=order_id, full_pass=True)


def _bucket_0_short(
    lines: Sequence[ReserveLine], *, available_at_most: dict[int, int], order_id: int, full_pass: bool
) -> None:
    """Bucket 0 came up short for ``lines``: the one place that asks whether the bucket count changed since the
    quote read. A product with other stock rows (the quote counted them, or K was raised since: ops spread the units
    while the sale runs, and they are in the new rows, not gone) is not refused: after an update (``full_pass``)
    the full pass takes its rows now; after a lock step the transaction runs again, and its fresh quote sends the
    product through the full pass (locking its other rows now would break the lock order: we hold later products'
    rows). Otherwise every line is refused, each remembered short."""
    moved = next((line for line in lines if line.stock_rows > 1 or has_other_stock_rows(line.product_id)), None)
    if moved is None:
        for line in lines:
            soldout.remember_short(line.product_id, available_at_most=available_at_most[line.product_id])
        raise StockConflict(product_ids=[line.product_id for line in lines])
    if not full_pass:
        raise RestartTransaction(
            "stock rows added since the quote read",
            give_up=StockConflict(product_ids=[line.product_id for line in lines]),
            max_attempts=settings.DB_TRANSIENT_RETRIES + 1,
        )
    _reserve_from_all(moved, order_id=order_id)


def _reserve_bucketed(step: Claim, *, order_id: int) -> None:
    """A bucketed product (docs/strategies.md#stock-buckets): a bucket claim (a free bucket without waiting, the
    order's own first); else a waiting claim (the order's bucket, or the next one round the ring with the units);
    else the full pass, which refuses only when the product really lacks them.

    The claims run after one savepoint, rolled back to when a claim comes back empty (ROLLBACK TO keeps the
    savepoint for the next). A statement that found a row changed since its snapshot locks the row's newest version
    before it re-checks it, and keeps that lock even when the re-check fails; rolling back to the savepoint lets go of
    it, so the next claim (and the full pass, which takes the buckets in order) waits while holding no bucket of
    this product: no deadlock (docs/locking.md). The SAVEPOINT is sent before the claim, so it does not lengthen the
    time a bucket is held."""
    line = step.line
    attempt = transaction.savepoint()
    for statement in step.statements:
        if _reserve_in(_statement(statement), line, order_id=order_id, bucket_count=line.bucket_count) is not None:
            return  # the savepoint is released by COMMIT: a RELEASE would be a round trip while the bucket is held
        transaction.savepoint_rollback(attempt)
    _reserve_from_all(line, order_id=order_id)


def lock_rows(*, product_ids: list[int], nowait: bool) -> dict[int, int]:
    """``SELECT … FOR NO KEY UPDATE [NOWAIT]`` of the products' bucket-0 rows, ascending (lock order step 8); returns
    available stock by id. With NOWAIT a row that another transaction holds is :class:`LockBusy` (409) at once instead
    of a wait."""
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


def has_other_stock_rows(product_id: int) -> bool:
    """Whether the product has stock rows besides bucket 0 now (a fresh read, no lock). Asked only when bucket 0 came
    up short for a product the quote saw with one row (:func:`_bucket_0_short`)."""
    return StockBucket.objects.filter(product_id=product_id).exclude(bucket=0).exists()


def _reserve_from_all(line: ReserveLine, *, order_id: int) -> None:
    """The full pass: lock every stock row of the product (ascending), refuse if their total is short (a true
    sold-out), else move units into the bucket below K that holds the most (``rebalance`` ledger rows, taken from
    the fullest rows first, as :func:`inventory.buckets.spread` takes them) and reserve there with the reserve
    statement."""
    available = lock_all_buckets(product_id=line.product_id)
    total = sum(available.values())
    if total < line.qty:
        soldout.remember_short(line.product_id, available_at_most=total)
        raise StockConflict(product_ids=[line.product_id])
    target = max(range(line.bucket_count), key=lambda b: (available.get(b, 0), -b))
    need = line.qty - available.get(target, 0)
    moves: dict[int, int] = {}
    if need > 0:
        others = {bucket: units for bucket, units in available.items() if bucket != target}
        moves = {**spread(available=others, bucket_count=line.bucket_count, delta=-need), target: need}
    move_between_buckets(
        product_id=line.product_id, moves=moves, reason=Reason.REBALANCE, actor=None, note="units for a checkout"
    )
    if _reserve_in(RESERVE_SQL, line, order_id=order_id, bucket=target) is None:
        raise InventoryCorrupted(product_ids=[line.product_id])  # rows locked, units moved: only corruption


class ReservedUnits(NamedTuple):
    """Units one reservation holds: ``qty`` of a product for an order, in the stock row ``bucket`` it names."""

    order_id: int
    product_id: int
    bucket: int | None
    qty: int


def _move_reserved(*, lines: Sequence[ReservedUnits], reason: str, back_to_available: bool) -> None:
    """Take units out of ``reserved_stock`` (and back into ``available_stock`` when ``back_to_available``), in the
    bucket each reservation names: one summed guarded update per (product, bucket), ascending, and one ledger row per
    line so that every unit stays traceable to its order. A reservation without a bucket, or whose bucket does not
    hold its units, is :class:`InventoryCorrupted`: the units are never taken from another bucket."""
    require_transaction()
    placed: list[tuple[int, int, int, int]] = []  # (product, bucket, order, qty)
    for line in lines:
        if line.bucket is None:  # never guessed (bucket 0 is not a default): the reservation names where units are
            raise InventoryCorrupted(product_ids=[line.product_id])
        placed.append((line.product_id, line.bucket, line.order_id, line.qty))
    placed.sort()
    totals: dict[tuple[int, int], int] = {}
    for product_id, bucket, _order_id, qty in placed:
        totals[(product_id, bucket)] = totals.get((product_id, bucket), 0) + qty
    # Ledger first, counters last (as in stock_reserve): the stock row locks are then held only for the
    # guarded updates and the COMMIT. A failed guard raises and rolls the ledger rows back with everything else.
    ledger_append(
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
        if not guarded_update(product_id=product_id, bucket=bucket, guard={"reserved_stock__gte": qty}, **changes):
            raise InventoryCorrupted(product_ids=[product_id])


@transaction.atomic(savepoint=False)
def stock_release(*, lines: Sequence[ReservedUnits], reason: str) -> None:
    """Return reserved units to available (reservations expired or cancelled)."""
    if reason not in (Reason.EXPIRE, Reason.CANCEL):
        raise ValueError(f"stock_release cannot record reason {reason!r}")
    _move_reserved(lines=lines, reason=reason, back_to_available=True)


@transaction.atomic(savepoint=False)
def stock_consume(*, lines: Sequence[ReservedUnits]) -> None:
    """Reserved units leave the shop: their orders were paid."""
    _move_reserved(lines=lines, reason=Reason.CONSUME, back_to_available=False)
