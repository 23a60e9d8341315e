"""Consistency audit of stock, reservations, orders and the stock ledger.

Used by ``manage.py audit_inventory``, by the test suite after every concurrency test, and by the load
tests. Each check is one SQL query that returns the offending rows, so the audit reads a consistent
snapshot when run inside a REPEATABLE READ transaction.
"""

import dataclasses

from django.db import connection, transaction

from inventory.models import StockMovement
from inventory.selectors import STOCK_SUM_SQL
from orders.models import OrderStatus, ReservationStatus

# Status values come from the TextChoices; they are constants, interpolated once when this module loads.
ACTIVE, CONSUMED = ReservationStatus.ACTIVE.value, ReservationStatus.CONSUMED.value
EXPIRED, R_CANCELLED = ReservationStatus.EXPIRED.value, ReservationStatus.CANCELLED.value
PENDING, PAID, CANCELLED = OrderStatus.PENDING_PAYMENT.value, OrderStatus.PAID.value, OrderStatus.CANCELLED.value
CONSUME, RESERVE = StockMovement.Reason.CONSUME.value, StockMovement.Reason.RESERVE.value

CHECKS: dict[str, str] = {
    "negative_stock": """
        SELECT p.id, format('available=%%s reserved=%%s', stock.available_stock, stock.reserved_stock)
        FROM products p {STOCK_SUM_SQL} WHERE stock.available_stock < 0 OR stock.reserved_stock < 0
    """,
    "reserved_vs_active_reservations": """
        SELECT p.id, format('reserved_stock=%%s but active reservations hold %%s', stock.reserved_stock, COALESCE(r.qty, 0))
        FROM products p {STOCK_SUM_SQL}
        LEFT JOIN (SELECT product_id, SUM(qty) AS qty FROM inventory_reservations WHERE status = '{ACTIVE}' GROUP BY product_id) r
               ON r.product_id = p.id
        WHERE stock.reserved_stock <> COALESCE(r.qty, 0)
    """,
    "counters_vs_ledger": """
        SELECT p.id,
               format('counters available=%%s reserved=%%s but the ledger adds up to available=%%s reserved=%%s',
                      stock.available_stock, stock.reserved_stock, COALESCE(m.available, 0), COALESCE(m.reserved, 0))
        FROM products p {STOCK_SUM_SQL}
        LEFT JOIN (SELECT product_id, SUM(available_delta) AS available, SUM(reserved_delta) AS reserved
                   FROM stock_movements GROUP BY product_id) m ON m.product_id = p.id
        WHERE stock.available_stock <> COALESCE(m.available, 0) OR stock.reserved_stock <> COALESCE(m.reserved, 0)
    """,
    "bucket_counters_vs_ledger": """
        SELECT b.product_id,
               format('bucket %%s: available=%%s reserved=%%s but its ledger rows add up to available=%%s reserved=%%s',
                      b.bucket, b.available_stock, b.reserved_stock, COALESCE(m.available, 0), COALESCE(m.reserved, 0))
        FROM stock_buckets b
        LEFT JOIN (SELECT product_id, bucket, SUM(available_delta) AS available, SUM(reserved_delta) AS reserved
                   FROM stock_movements GROUP BY product_id, bucket) m
               ON m.product_id = b.product_id AND m.bucket = b.bucket
        WHERE b.available_stock <> COALESCE(m.available, 0) OR b.reserved_stock <> COALESCE(m.reserved, 0)
    """,
    "bucket_reserved_vs_reservations": """
        SELECT b.product_id, format('bucket %%s: reserved_stock=%%s but active reservations held there hold %%s',
                                    b.bucket, b.reserved_stock, COALESCE(r.qty, 0))
        FROM stock_buckets b
        LEFT JOIN (SELECT product_id, bucket, SUM(qty) AS qty FROM inventory_reservations
                   WHERE status = '{ACTIVE}' GROUP BY product_id, bucket) r
               ON r.product_id = b.product_id AND r.bucket = b.bucket
        WHERE b.reserved_stock <> COALESCE(r.qty, 0)
    """,
    "reservation_bucket_vs_ledger": """
        SELECT r.id, format('reservation names bucket %%s but its reserve ledger rows name: %%s', r.bucket,
                            COALESCE(string_agg(m.bucket::text, ', ' ORDER BY m.id), 'none'))
        FROM inventory_reservations r
        LEFT JOIN stock_movements m ON m.order_id = r.order_id AND m.product_id = r.product_id
                                   AND m.reason = '{RESERVE}'
        GROUP BY r.id, r.bucket
        HAVING count(m.id) <> 1 OR bool_or(m.bucket <> r.bucket)
    """,
    "consumed_vs_ledger": """
        SELECT p.id, format('consumed reservations hold %%s units but the ledger consumed %%s', COALESCE(r.qty, 0), COALESCE(m.qty, 0))
        FROM products p
        LEFT JOIN (SELECT product_id, SUM(qty) AS qty FROM inventory_reservations WHERE status = '{CONSUMED}' GROUP BY product_id) r
               ON r.product_id = p.id
        LEFT JOIN (SELECT product_id, -SUM(reserved_delta) AS qty FROM stock_movements WHERE reason = '{CONSUME}' GROUP BY product_id) m
               ON m.product_id = p.id
        WHERE COALESCE(r.qty, 0) <> COALESCE(m.qty, 0)
    """,
    "order_vs_reservations": """
        SELECT o.id, format('order is %%s but its reservations are: %%s', o.status, COALESCE(string_agg(r.status, ',' ORDER BY r.product_id), 'none'))
        FROM orders o LEFT JOIN inventory_reservations r ON r.order_id = o.id
        GROUP BY o.id, o.status
        HAVING NOT (
            COUNT(r.id) > 0 AND (
                (o.status = '{PENDING}' AND bool_and(r.status = '{ACTIVE}')) OR
                (o.status = '{PAID}' AND bool_and(r.status = '{CONSUMED}')) OR
                (o.status = '{CANCELLED}' AND bool_and(r.status IN ('{EXPIRED}', '{R_CANCELLED}')))
            )
        )
    """,
    "reservation_expiry_vs_order": """
        SELECT r.id, format('reservation expires at %%s but its order at %%s', r.expires_at, o.payment_expires_at)
        FROM inventory_reservations r JOIN orders o ON o.id = r.order_id
        WHERE r.status = '{ACTIVE}' AND r.expires_at IS DISTINCT FROM o.payment_expires_at
    """,
}

_VALUES = {
    "ACTIVE": ACTIVE,
    "CONSUMED": CONSUMED,
    "EXPIRED": EXPIRED,
    "R_CANCELLED": R_CANCELLED,
    "PENDING": PENDING,
    "PAID": PAID,
    "CANCELLED": CANCELLED,
    "CONSUME": CONSUME,
    "RESERVE": RESERVE,
    "STOCK_SUM_SQL": STOCK_SUM_SQL,
}
CHECKS = {name: sql.format(**_VALUES) for name, sql in CHECKS.items()}

DESCRIPTIONS = {
    "negative_stock": "no counter is negative",
    "reserved_vs_active_reservations": "reserved_stock equals the sum of active reservations",
    "counters_vs_ledger": "available/reserved equal what the stock ledger adds up to",
    "bucket_counters_vs_ledger": "each stock bucket's counters equal its own ledger rows",
    "bucket_reserved_vs_reservations": "each stock bucket holds exactly the active reservations placed in it",
    "reservation_bucket_vs_ledger": "each reservation names the bucket of its one reserve ledger row",
    "consumed_vs_ledger": "units consumed by paid orders equal the ledger's consume rows",
    "order_vs_reservations": "each order's status agrees with its reservations",
    "reservation_expiry_vs_order": "active reservations expire with their order",
}


@dataclasses.dataclass(frozen=True)
class Violation:
    check: str
    subject_id: int
    detail: str

    def __str__(self) -> str:
        return f"[{self.check}] #{self.subject_id}: {self.detail}"


def audit_inventory(*, limit_per_check: int = 50) -> list[Violation]:
    """Run every check on one snapshot; returns a list of :class:`Violation` (empty when all is well)."""
    violations: list[Violation] = []
    outermost = not connection.in_atomic_block
    with transaction.atomic(), connection.cursor() as cursor:
        if outermost:  # one snapshot for every check; inside a caller's transaction, use the caller's
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        for name, sql in CHECKS.items():
            cursor.execute(f"{sql} ORDER BY 1 LIMIT %s", [limit_per_check])
            violations.extend(Violation(name, row[0], row[1]) for row in cursor.fetchall())
    return violations
