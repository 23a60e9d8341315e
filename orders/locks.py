"""Locks on orders and then their reservations (steps 5 and 6 of the lock order in docs/locking.md)."""

from collections.abc import Sequence
from datetime import datetime

from django.contrib.auth.models import User

from orders.models import Order, Reservation
from skincare.locks import require_transaction


def lock_order(*, order_id: int, customer: User | None = None) -> Order | None:
    """Lock one order row (waiting for it) and return it, or None when it does not exist or is not
    ``customer``'s. FOR NO KEY UPDATE: the row is updated, never deleted, so inserts that reference it
    (payment attempts) are not blocked."""
    require_transaction()
    qs = Order.objects.select_for_update(no_key=True).filter(pk=order_id)
    if customer is not None:
        qs = qs.filter(customer=customer)
    return qs.first()


def lock_due_orders(*, limit: int, due_by: datetime | None = None, skip: Sequence[int] = ()) -> list[Order]:
    """Claim up to ``limit`` pending orders whose payment window closed by the database clock (by ``due_by`` when
    given: the instant up to which the caller has asked the payment gateway about them), but none in ``skip``. Rows
    that another transaction holds (a payment, a cancel, another sweeper) are skipped, not waited for."""
    require_transaction()
    return list(
        Order.objects.raw(
            """
            SELECT id, payment_expires_at FROM orders
            WHERE status = %s AND payment_expires_at <= LEAST(now(), %s::timestamptz)
              AND id <> ALL(%s::bigint[])
            ORDER BY id
            LIMIT %s
            FOR NO KEY UPDATE SKIP LOCKED
            """,
            [Order.Status.PENDING_PAYMENT.value, due_by, list(skip), limit],
        )
    )


def lock_active_reservations(*, order_ids: list[int]) -> list[Reservation]:
    """Lock the active reservations of already-locked orders, by ascending (order, product)."""
    require_transaction()
    return list(
        Reservation.objects.select_for_update(no_key=True)
        .filter(order_id__in=order_ids, status=Reservation.Status.ACTIVE)
        .order_by("order_id", "product_id")
    )
