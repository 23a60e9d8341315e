"""Order state machine: ``pending_payment`` → ``paid`` | ``cancelled``. (An order is born ``pending_payment`` by
checkout, ``checkout.services``, whose one statement writes it with everything that belongs to it.)

Every transition is a conditional update (``WHERE status = 'pending_payment'``) taking lock order steps 5, 6 and 8
(docs/locking.md). Each reservation's units go back to, or leave from, the stock row (bucket) the reservation
names (``inventory.reserve``). The reservation rows (``Reservation``) are orders': they are written here, by
``checkout.services.ORDER_SQL`` (inserted with their order) and, for the bucket a reservation names, by the reserve
statement of ``inventory.reserve``.
"""

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models.functions import Now

from inventory import reserve as inventory_reserve
from inventory.models import StockMovement
from inventory.reserve import ReservedUnits
from orders.exceptions import OrderNotFound, OrderNotPending
from orders.locks import lock_active_reservations, lock_due_orders, lock_order
from orders.models import Order, Reservation
from skincare.db import db_now, retry_transient

# A new order's rows, as the first common table expressions of the checkout's one writing statement
# (``checkout.services.ORDER_SQL``, which adds the payment attempt and reads the customer's counts): ``new_order``,
# ``line`` (the lines as given), ``new_lines`` and ``new_reservations``. The only place orders, their lines and their
# reservations are created. ``now()`` is the transaction's start: the order's deadline and every reservation's expiry
# are that one instant by the database's clock. Each reservation names bucket 0, a one-row product's only stock row;
# the reserve statement that takes a bucketed product's units names the bucket it took (``inventory.reserve``).
ORDER_ROWS_SQL = """
new_order AS (
    INSERT INTO orders (customer_id, status, payment_expires_at, total, currency, created_at, updated_at)
    SELECT %(customer_id)s, %(pending_payment)s, now() + make_interval(secs => %(ttl_seconds)s), %(total)s,
           %(currency)s, statement_timestamp(), statement_timestamp()
    -- The sale window decided again by this statement's own clock (the quote used the transaction's start, and
    -- waits since may have outlasted sale_ends_at): nothing at all is written once a window has closed.
    WHERE NOT EXISTS (SELECT 1 FROM products p
                       WHERE p.id = ANY(%(product_ids)s::bigint[]) AND p.sale_ends_at <= statement_timestamp())
    RETURNING id, total, created_at, payment_expires_at
), line AS (
    SELECT * FROM unnest(%(product_ids)s::bigint[], %(qtys)s::integer[], %(prices)s::numeric[])
        AS line(product_id, qty, unit_price)
), new_lines AS (
    INSERT INTO order_lines (order_id, product_id, qty, unit_price)
    SELECT new_order.id, line.product_id, line.qty, line.unit_price FROM new_order, line
), new_reservations AS (
    INSERT INTO inventory_reservations (order_id, product_id, qty, bucket, status, expires_at, created_at,
                                        updated_at)
    SELECT new_order.id, line.product_id, line.qty, 0, %(active)s, new_order.payment_expires_at,
           new_order.created_at, new_order.created_at
    FROM new_order, line
)
"""
# The values of the statuses ORDER_ROWS_SQL writes (the models' choices, checked by their constraints).
ORDER_ROWS_CONSTANTS = {
    "pending_payment": Order.Status.PENDING_PAYMENT.value,
    "active": Reservation.Status.ACTIVE.value,
    "currency": settings.SHOP_CURRENCY,  # the shop's currency (checked at start-up, skincare.E012)
}


def _reservations_end(*, reservations: list[Reservation], status: str) -> None:
    """The active reservations of locked orders end (``expired``, ``cancelled`` or ``consumed``)."""
    Reservation.objects.filter(pk__in=[r.pk for r in reservations]).update(status=status, updated_at=Now())


@dataclasses.dataclass
class TransitionResult:
    orders: int = 0
    reservations: int = 0
    units: int = 0


def _close_pending(
    *, order_ids: list[int], reservation_status: str, cancel_reason: str | None = None, paid: bool = False
) -> TransitionResult:
    """Move locked pending orders to their end state; their active reservations end with them.

    Caller holds the order locks.
    """
    reservations = lock_active_reservations(order_ids=order_ids)
    # Each reservation's units leave the stock row it names (inventory refuses one that names none).
    lines = [ReservedUnits(r.order_id, r.product_id, r.bucket, r.qty) for r in reservations]
    if paid:
        changes: dict[str, Any] = {"status": Order.Status.PAID}
    else:
        changes = {"status": Order.Status.CANCELLED, "cancel_reason": cancel_reason}
    orders = Order.objects.filter(pk__in=order_ids, status=Order.Status.PENDING_PAYMENT).update(
        updated_at=Now(), **changes
    )
    if reservations:
        _reservations_end(reservations=reservations, status=reservation_status)
        # Stock rows last: they are the contended ones, locked only for these updates and the COMMIT.
        if paid:
            inventory_reserve.stock_consume(lines=lines)
        else:
            ledger_reason = (
                StockMovement.Reason.EXPIRE
                if reservation_status == Reservation.Status.EXPIRED
                else StockMovement.Reason.CANCEL
            )
            inventory_reserve.stock_release(lines=lines, reason=ledger_reason)
    return TransitionResult(orders=orders, reservations=len(reservations), units=sum(line.qty for line in lines))


def _close_one(*, order: Order, reservation_status: str, cancel_reason: str | None = None, paid: bool = False) -> Order:
    """One locked order out of ``pending_payment``. The in-memory order is updated from what was written
    rather than re-read: a re-read would be one more round trip while the stock rows are locked."""
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
def orders_expire_due(*, batch_size: int = 200, due_by: datetime | None = None, skip: Sequence[int] = ()) -> SweepBatch:
    """One sweeper batch: claim due pending orders with SKIP LOCKED, expire their reservations, return the
    units with one summed update per product (ascending id), cancel the orders (payment_timeout). ``due_by``: only
    orders due by then (the sweeper asked the payment gateway about those; ``payments.sessions``); ``skip``: never
    these (another sweeper is asking the gateway about them, and cancels them itself)."""
    due = lock_due_orders(limit=batch_size, due_by=due_by, skip=skip)
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
