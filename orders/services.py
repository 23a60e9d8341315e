"""Order state machine: ``pending_payment`` → ``paid`` | ``cancelled``.

Every transition is a conditional update (``WHERE status = 'pending_payment'``) made under the lock order
defined in ``orders.locks``: order row → its reservations → inventory rows by ascending product id.
"""

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models.functions import Now

from inventory import selectors as inventory_selectors
from inventory import services as inventory_services
from inventory import soldout
from inventory.exceptions import InvalidProduct, StockConflict
from inventory.models import InventoryStrategy, StockMovement
from orders import locks
from orders.exceptions import OrderNotFound, OrderNotPending, PurchaseLimitExceeded, TooManyPendingOrders
from orders.locks import lock_active_reservations, lock_due_orders, lock_order
from orders.models import Order, OrderLine, Reservation
from skincare.db import SERIALIZABLE, IsolationRequired, current_isolation, db_now, retry_transient
from skincare.errors import InvalidInput


def merge_quantities(items: Iterable[tuple[int, int]]) -> dict[int, int]:
    """``[(product_id, qty), ...]`` → ``{product_id: total qty}``; a product listed twice is one line."""
    quantities: dict[int, int] = {}
    for product_id, qty in items:
        quantities[product_id] = quantities.get(product_id, 0) + qty
    too_many = {pid: qty for pid, qty in quantities.items() if qty > settings.CHECKOUT_MAX_QTY}
    if too_many:
        raise InvalidInput(
            f"At most {settings.CHECKOUT_MAX_QTY} units of one product per order.",
            fields={"items": [f"product {pid}: {qty} units" for pid, qty in sorted(too_many.items())]},
        )
    return quantities


# One statement writes the order, its lines, its reservation rows and the reserve ledger rows (and whatever the
# caller adds, e.g. the payment attempt): one round trip instead of five, no ORM compilation on the hot path
# (docs/benchmarks.md has the measurement). ``now()`` is the transaction's start time, so the order's deadline and
# every reservation's ``expires_at`` are the same value, by the database's clock.
_INSERT_ORDER_SQL = """
WITH new_order AS (
    INSERT INTO orders (customer_id, status, payment_expires_at, total, created_at, updated_at)
    VALUES (%(customer_id)s, %(order_status)s, now() + make_interval(secs => %(ttl_seconds)s), %(total)s,
            statement_timestamp(), statement_timestamp())
    RETURNING id, total, created_at, payment_expires_at
), line_rows AS (
    SELECT * FROM unnest(%(product_ids)s::bigint[], %(qtys)s::integer[], %(prices)s::numeric[])
        AS line(product_id, qty, unit_price)
), new_lines AS (
    INSERT INTO order_lines (order_id, product_id, qty, unit_price)
    SELECT new_order.id, line.product_id, line.qty, line.unit_price FROM new_order, line_rows AS line
), reserve_source AS (
    SELECT new_order.id AS order_id, line.product_id, line.qty, new_order.created_at AS at
    FROM new_order, line_rows AS line
), new_reservations AS (
    INSERT INTO inventory_reservations (order_id, product_id, qty, status, expires_at, created_at, updated_at)
    SELECT new_order.id, line.product_id, line.qty, %(reservation_status)s, new_order.payment_expires_at,
           new_order.created_at, new_order.created_at
    FROM new_order, line_rows AS line
), {ctes}
SELECT id, created_at, payment_expires_at, {pending}, {held} FROM new_order
"""
# The same statement reads what the per-customer checks need: it runs after the customer's checkout lock was
# granted, so its snapshot holds every order that customer's earlier checkouts committed, and none of its own rows.
# The customer's open pending_payment orders (for MAX_PENDING_ORDERS_PER_CUSTOMER). An order whose payment window
# closed (database clock) is not open any more, even before the sweeper cancels it: its units are coming back.
_PENDING_SQL = """(SELECT count(*) FROM orders o WHERE o.customer_id = %(customer_id)s
    AND o.status = 'pending_payment' AND o.payment_expires_at > now())"""
# Units of the limited products in the customer's open pending_payment and paid orders ({"product_id": units}).
_HELD_SQL = """(SELECT jsonb_object_agg(held.product_id, held.units) FROM (
    SELECT ol.product_id, sum(ol.qty) AS units FROM order_lines ol JOIN orders o ON o.id = ol.order_id
    WHERE o.customer_id = %(customer_id)s
      AND (o.status = 'paid' OR (o.status = 'pending_payment' AND o.payment_expires_at > now()))
      AND ol.product_id = ANY(%(limited_ids)s::bigint[])
    GROUP BY ol.product_id) AS held)"""

# A CTE fragment of the order's INSERT statement and its parameters. Fragments may read ``new_order`` (id, total,
# created_at, payment_expires_at), ``line_rows`` (product_id, qty, unit_price) and ``reserve_source``.
CteFragment = tuple[str, dict[str, Any]]


@transaction.atomic(savepoint=False)
def order_open(*, customer: User, quantities: Mapping[int, int], also_insert: Sequence[CteFragment] = ()) -> Order:
    """Insert a ``pending_payment`` order with its lines, its (not yet backed) reservation rows and their reserve
    ledger rows, in one statement; ``also_insert`` adds the caller's rows to that statement (checkout adds the
    payment attempt). The caller must back the reservations with ``order_reserve_stock`` in the same transaction.

    Products whose strategy is ``serializable`` need the whole transaction at SERIALIZABLE: outside it, this raises
    ``IsolationRequired`` before writing anything and the runner starts over at that level.

    Per-customer checks, in this order (docs/reliability.md): visibly short (409 stock_conflict), unknown product
    (422), ``max_per_customer`` (409 purchase_limit_exceeded), ``MAX_PENDING_ORDERS_PER_CUSTOMER`` (409
    too_many_pending_orders), then the guarded stock update (409 stock_conflict). The last two counts hold under
    concurrency because they are read after the customer's checkout lock (``orders.locks``, step 0 of the lock
    order) is granted; with the default settings that lock rides on the product read and the counts on the order
    insert, so the checks cost no extra round trip.

    No row lock is taken here. A product that is visibly short already is refused before anything is written:
    first from this worker's memory of products it just saw sold out (``inventory.soldout``, at most 250 ms old,
    no query at all), then by one unlocked read of prices and available stock. Both can only turn a request away
    early; the guarded UPDATE in ``stock_reserve`` stays the protection for every request that passes.
    """
    remembered = soldout.known_short(quantities)
    if remembered:
        raise StockConflict(product_ids=remembered)
    cap = settings.MAX_PENDING_ORDERS_PER_CUSTOMER
    # With the pending cap on, the product read also takes the customer's checkout lock (no extra round trip).
    also_select = locks.customer_lock_expression(customer_id=customer.pk) if cap else None
    quotes = inventory_selectors.product_quotes(product_ids=list(quantities), also_select=also_select)
    missing = sorted(set(quantities) - set(quotes))
    if missing:
        raise InvalidProduct(product_ids=missing)
    short = sorted(pid for pid, quote in quotes.items() if quote.available < quantities[pid])
    if short:
        for pid in short:
            soldout.remember_short(pid, available_at_most=quotes[pid].available)
        raise StockConflict(product_ids=short)
    if current_isolation() != SERIALIZABLE and any(
        q.strategy == InventoryStrategy.SERIALIZABLE for q in quotes.values()
    ):
        raise IsolationRequired(SERIALIZABLE)  # nothing written yet: the runner starts over at SERIALIZABLE
    limits = {pid: quote.max_per_customer for pid, quote in quotes.items() if quote.max_per_customer is not None}
    over = sorted(pid for pid, limit in limits.items() if quantities[pid] > limit)
    if over:  # more than the limit in this one request: no need to look at earlier orders
        raise PurchaseLimitExceeded(product_ids=over)
    if limits and not cap:
        locks.lock_customer(customer_id=customer.pk)  # the product read above did not take it
    product_ids = sorted(quantities)
    prices = {pid: quotes[pid].price for pid in product_ids}
    total = sum((prices[pid] * quantities[pid] for pid in product_ids), Decimal(0))
    ledger_cte, ledger_params = inventory_services.stock_reserve_ledger_cte(source="reserve_source")
    fragments = [(ledger_cte, ledger_params), *also_insert]
    params: dict[str, Any] = {
        "customer_id": customer.pk,
        "order_status": Order.Status.PENDING_PAYMENT.value,
        "reservation_status": Reservation.Status.ACTIVE.value,
        "ttl_seconds": settings.RESERVATION_TTL_SECONDS,
        "total": total,
        "product_ids": product_ids,
        "qtys": [quantities[pid] for pid in product_ids],
        "prices": [prices[pid] for pid in product_ids],
        "limited_ids": sorted(limits),
    }
    for _sql, fragment_params in fragments:
        params.update(fragment_params)
    sql = _INSERT_ORDER_SQL.format(
        ctes=", ".join(sql.strip() for sql, _ in fragments),
        pending=_PENDING_SQL if cap else "NULL::bigint",
        held=_HELD_SQL if limits else "NULL::jsonb",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        order_id, created_at, deadline, pending, held = cursor.fetchone()
    # A refusal below rolls back the rows just inserted with the rest of the transaction.
    if limits:
        # Django keeps jsonb as text on raw cursors (its ORM decodes JSONField values itself).
        held_units = json.loads(held) if isinstance(held, str) else (held or {})
        over = sorted(pid for pid, limit in limits.items() if held_units.get(str(pid), 0) + quantities[pid] > limit)
        if over:
            raise PurchaseLimitExceeded(product_ids=over)
    if cap and pending >= cap:
        raise TooManyPendingOrders(max_pending_orders=cap)
    order = Order(
        pk=order_id,
        customer=customer,
        status=Order.Status.PENDING_PAYMENT,
        payment_expires_at=deadline,
        total=total,
        created_at=created_at,
        updated_at=created_at,
    )
    order._state.adding = False
    order.placed_quotes = quotes
    order.placed_lines = [
        OrderLine(order=order, product_id=pid, qty=quantities[pid], unit_price=prices[pid]) for pid in product_ids
    ]
    return order


@transaction.atomic(savepoint=False)
def order_reserve_stock(*, order: Order, quantities: Mapping[int, int]) -> None:
    """Back a just-opened order's reservations with stock. Takes the inventory row locks, so a checkout
    calls it last: the hot row then stays locked only for these UPDATEs and the COMMIT."""
    inventory_services.stock_reserve(quantities=quantities, order_id=order.pk, quotes=order.placed_quotes)


@dataclasses.dataclass
class TransitionResult:
    orders: int = 0
    reservations: int = 0
    units: int = 0


def _close_pending(
    *, order_ids: list[int], reservation_status: str, cancel_reason: str | None = None, paid: bool = False
) -> TransitionResult:
    """Move locked pending orders to their end state; their active reservations end with them.

    Caller holds the order locks. Reservations are locked next, then inventory rows (inside
    ``inventory.services``) by ascending product id.
    """
    reservations = lock_active_reservations(order_ids=order_ids)
    lines = [(r.order_id, r.product_id, r.qty) for r in reservations]
    if paid:
        changes: dict[str, Any] = {"status": Order.Status.PAID}
    else:
        changes = {"status": Order.Status.CANCELLED, "cancel_reason": cancel_reason}
    orders = Order.objects.filter(pk__in=order_ids, status=Order.Status.PENDING_PAYMENT).update(
        updated_at=Now(), **changes
    )
    if reservations:
        Reservation.objects.filter(pk__in=[r.pk for r in reservations]).update(
            status=reservation_status, updated_at=Now()
        )
        # Inventory rows last: they are the contended ones, locked only for these updates and the COMMIT.
        if paid:
            inventory_services.stock_consume(lines=lines)
        else:
            ledger_reason = (
                StockMovement.Reason.EXPIRE
                if reservation_status == Reservation.Status.EXPIRED
                else StockMovement.Reason.CANCEL
            )
            inventory_services.stock_release(lines=lines, reason=ledger_reason)
    return TransitionResult(orders=orders, reservations=len(reservations), units=sum(line[2] for line in lines))


def _close_one(*, order: Order, reservation_status: str, cancel_reason: str | None = None, paid: bool = False) -> Order:
    """One locked order out of ``pending_payment``. The in-memory order is updated from what was written
    rather than re-read: a re-read would be one more round trip while the inventory rows are locked."""
    if order.status != Order.Status.PENDING_PAYMENT:
        raise OrderNotPending(order_id=order.pk, status=order.status)
    _close_pending(order_ids=[order.pk], reservation_status=reservation_status, cancel_reason=cancel_reason, paid=paid)
    order.status = Order.Status.PAID if paid else Order.Status.CANCELLED
    order.cancel_reason = None if paid else cancel_reason
    return order


@retry_transient
@transaction.atomic
def order_cancel(
    *, order_id: int, customer: User | None = None, reason: str = Order.CancelReason.CUSTOMER_CANCELLED
) -> Order:
    """Cancel a pending order and return its units. ``customer`` limits the search to that customer's
    orders (an API caller never learns that someone else's order exists)."""
    order = lock_order(order_id=order_id, customer=customer)
    if order is None:
        raise OrderNotFound(order_id=order_id)
    return _close_one(order=order, reservation_status=Reservation.Status.CANCELLED, cancel_reason=reason)


@transaction.atomic(savepoint=False)
def order_mark_paid(*, order: Order) -> Order:
    """Pending → paid: reservations consumed, reserved units leave the shop. Caller holds the order lock
    and has checked, by the database clock, that the payment window is still open."""
    return _close_one(order=order, reservation_status=Reservation.Status.CONSUMED, paid=True)


@transaction.atomic(savepoint=False)
def order_expire(*, order: Order) -> Order:
    """Pending → cancelled (payment_timeout) for one locked order whose window has closed; the sweeper
    does the same in batches. Used when a payment arrives after the deadline but before the sweeper."""
    return _close_one(
        order=order, reservation_status=Reservation.Status.EXPIRED, cancel_reason=Order.CancelReason.PAYMENT_TIMEOUT
    )


@dataclasses.dataclass
class SweepBatch(TransitionResult):
    oldest_overdue_seconds: float = 0.0


@retry_transient
@transaction.atomic
def orders_expire_due(*, batch_size: int = 200) -> SweepBatch:
    """One sweeper batch: claim due pending orders with SKIP LOCKED, expire their reservations, return the
    units with one summed update per product (ascending id), cancel the orders (payment_timeout)."""
    due = lock_due_orders(limit=batch_size)
    if not due:
        return SweepBatch()
    oldest = min(order.payment_expires_at for order in due if order.payment_expires_at is not None)
    overdue = (db_now() - oldest).total_seconds()
    result = _close_pending(
        order_ids=[order.pk for order in due],
        reservation_status=Reservation.Status.EXPIRED,
        cancel_reason=Order.CancelReason.PAYMENT_TIMEOUT,
    )
    return SweepBatch(**dataclasses.asdict(result), oldest_overdue_seconds=overdue)
