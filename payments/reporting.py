"""The payments figures of ``manage.py sale_report`` (called by backoffice.sale_report):
late payments (money that arrived for an order no longer payable: expired or cancelled), the refunds to make, the
orders the sweeper expired without the gateway's word (``reconcile_payments`` compares them), and the money a gateway
reported for a transaction the shop did not issue (unmatched payments: the sale board, the report and
``reconcile_payments`` read :data:`UNMATCHED_OPEN_SQL`)."""

import datetime as dt
from decimal import Decimal
from typing import Any

from django.db import connection

from orders.models import OrderStatus
from payments.models import PaymentStatus

REFUND_REQUIRED, AMOUNT_MISMATCH = PaymentStatus.REFUND_REQUIRED.value, PaymentStatus.AMOUNT_MISMATCH.value
CURRENCY_MISMATCH = PaymentStatus.CURRENCY_MISMATCH.value
PAID = OrderStatus.PAID.value

# Attempts that recorded money needing ops, for the orders created since the opening with a line of the product.
# A refund_required attempt of a cancelled order is a late payment; one of a paid order is a second charge. The money
# is in the currency the gateway reported (else the order's): refunds are summed per currency, never across them.
PAYMENTS_SQL = f"""
    SELECT a.status, o.status = '{PAID}' AS order_paid, COALESCE(NULLIF(a.received_currency, ''), o.currency),
           count(*), COALESCE(SUM(COALESCE(a.received_amount, a.amount)), 0)
      FROM payment_attempts a
      JOIN orders o ON o.id = a.order_id
      JOIN order_lines l ON l.order_id = o.id AND l.product_id = %(product)s
     WHERE o.created_at >= %(since)s AND a.status IN ('{REFUND_REQUIRED}', '{AMOUNT_MISMATCH}', '{CURRENCY_MISMATCH}')
     GROUP BY 1, 2, 3
"""

# The orders to reconcile: those whose gateway session the sweeper marked, because it expired them while the gateway
# did not answer (payments.sessions.sessions_check_due); reconcile_payments compares them. The sale report counts
# them per product (UNRECONCILED_SQL), the sale board (backoffice.saleboard) all of them.
TO_RECONCILE_SQL = "SELECT s.order_id FROM payment_sessions s WHERE s.needs_reconciliation"

# The orders to reconcile created since the opening with a line of the product.
UNRECONCILED_SQL = f"""
    SELECT count(DISTINCT o.id)
      FROM orders o
      JOIN order_lines l ON l.order_id = o.id AND l.product_id = %(product)s
     WHERE o.created_at >= %(since)s AND o.id IN ({TO_RECONCILE_SQL})
"""

# The unmatched payments ops have not resolved yet (payments.models.UnmatchedPayment), oldest first.
UNMATCHED_OPEN_SQL = """
    SELECT id, gateway, gateway_order_id, transaction_id, gateway_status, amount, currency, received_at
      FROM unmatched_payments WHERE resolved_at IS NULL
     ORDER BY received_at, id
"""


def unmatched_payments_open() -> list[tuple[Any, ...]]:
    """The rows of :data:`UNMATCHED_OPEN_SQL`."""
    with connection.cursor() as cursor:
        cursor.execute(UNMATCHED_OPEN_SQL)
        return cursor.fetchall()


def payments_for_report(product_id: int, since: dt.datetime) -> dict[str, Any]:
    refund_amount: dict[str, Decimal] = {}  # currency -> the refunds' sum
    found = {"late_payments": 0, "refunds_to_make": 0, "refund_amount": refund_amount, "mismatches": 0}
    with connection.cursor() as cursor:
        cursor.execute(PAYMENTS_SQL, {"product": product_id, "since": since})
        for status, order_paid, currency, count, amount in cursor.fetchall():
            if status == REFUND_REQUIRED:
                found["refunds_to_make"] += count
                refund_amount[currency] = refund_amount.get(currency, Decimal("0.00")) + amount
                if not order_paid:
                    found["late_payments"] += count
            else:
                found["mismatches"] += count  # a wrong amount or currency: ops decide
        cursor.execute(UNRECONCILED_SQL, {"product": product_id, "since": since})
        found["to_reconcile"] = cursor.fetchone()[0]
        # Shop-wide: an unmatched payment names no order, so no product; the report shows every open one.
        cursor.execute(f"SELECT count(*) FROM ({UNMATCHED_OPEN_SQL}) u")
        found["unmatched"] = cursor.fetchone()[0]
    return found
