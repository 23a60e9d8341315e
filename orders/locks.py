"""The lock order, in one place.

Every transaction that locks more than one kind of row takes its locks in this order:

0. the customer's checkout lock (a transaction-scoped advisory lock on the customer id, checkout only);
1. order rows (``orders``), by ascending id;
2. that order's reservations (``inventory_reservations``), by ascending product id;
3. inventory rows (``inventories``), by ascending product id (``inventory.services``).

Checkout locks only inventory rows (its own new order is invisible to others until COMMIT); payment,
cancel and the sweeper follow the full order. Because every path climbs the same ladder, no two
transactions can each hold a lock that the other is waiting for. ``docs/locking.md`` has the proof sketch.
"""

from typing import Any

from django.contrib.auth.models import User
from django.db import connection

from orders.models import Order, Reservation
from skincare.db import require_transaction

# The first key of the two-key advisory lock form (``pg_advisory_xact_lock(int4, int4)``): the namespace of
# "checkout of customer N". The second key is the customer id (auth_user.id is an int4).
CUSTOMER_CHECKOUT_LOCK_NAMESPACE = 0x5C0C


def customer_lock_expression(*, customer_id: int) -> tuple[str, list[Any]]:
    """A SELECT-list expression (SQL, params) that takes the customer's checkout lock when the query that selects it
    runs (a sub-select: evaluated once), so the lock costs no round trip of its own. Transaction-scoped: released by
    COMMIT/ROLLBACK. That statement reads with a snapshot from before the lock was granted; what must be read after
    the lock (the customer's orders) is read by a later statement."""
    return "(SELECT 1 FROM pg_advisory_xact_lock(%s, %s))", [CUSTOMER_CHECKOUT_LOCK_NAMESPACE, customer_id]


def lock_customer(*, customer_id: int) -> None:
    """Take the customer's checkout lock (waiting for it) in its own statement."""
    require_transaction()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CUSTOMER_CHECKOUT_LOCK_NAMESPACE, customer_id])


def lock_order(*, order_id: int, customer: User | None = None) -> Order | None:
    """Lock one order row (waiting for it) and return it, or None when it does not exist or is not
    ``customer``'s. FOR NO KEY UPDATE: the row is updated, never deleted, so inserts that reference it
    (payment attempts) are not blocked."""
    require_transaction()
    qs = Order.objects.select_for_update(no_key=True).filter(pk=order_id)
    if customer is not None:
        qs = qs.filter(customer=customer)
    return qs.first()


def lock_due_orders(*, limit: int) -> list[Order]:
    """Claim up to ``limit`` pending orders whose payment window closed by the database clock. Rows that
    another transaction holds (a payment, a cancel, another sweeper) are skipped, not waited for."""
    require_transaction()
    return list(
        Order.objects.raw(
            """
            SELECT id, payment_expires_at FROM orders
            WHERE status = %s AND payment_expires_at <= now()
            ORDER BY id
            LIMIT %s
            FOR NO KEY UPDATE SKIP LOCKED
            """,
            [Order.Status.PENDING_PAYMENT.value, limit],
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
