"""Order state machine: ``pending_payment`` → ``paid`` | ``cancelled``. (An order is born ``pending_payment`` by
checkout, ``payments.checkout``, whose one statement writes it with everything that belongs to it.)

Every transition is a conditional update (``WHERE status = 'pending_payment'``) made under the lock order in
``skincare.locks`` (steps 5, 6 and 8). Each reservation's units
go back to, or leave from, the stock row (bucket) the reservation names (``inventory.reserve``).
"""

import dataclasses
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models.functions import Now

from inventory import reserve as inventory_reserve
from inventory.models import StockMovement
from inventory.reserve import HeldUnits
from orders.exceptions import OrderNotFound, OrderNotPending
from orders.locks import lock_active_reservations, lock_due_orders, lock_order
from orders.models import Order, Reservation
from skincare.db import db_now, retry_transient


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
    lines = [HeldUnits(r.order_id, r.product_id, r.bucket, r.qty) for r in reservations]
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
