"""The report after a sale (``manage.py sale_report``): computed from the stock ledger and the orders on one
REPEATABLE READ snapshot, with the consistency audit (orders.audit) run on that same snapshot, so the figures
are exactly what the audit vouches for. Late payments and refunds come from the payments app
(:func:`payments.reporting.payments_for_report`), on the same snapshot.

- orders / units / revenue: the orders created since ``since`` that have a line of the product, by status
  (``expired`` = cancelled with ``payment_timeout``; ``cancelled`` = by the customer or staff);
  revenue = the paid lines' ``qty * unit_price``, one sum per order currency (never added across currencies);
- units sold is checked against the ledger: the ``consume`` rows of those orders must add up to the same number;
- units available over time: the running sum of the product's ledger ``available_delta`` (its whole history, so
  the curve ends at today's counter); sold out = the first ledger row from the opening on that leaves 0 available;
- orders per second: the ledger's ``reserve`` rows (one per order and product) by second of their ``created_at``.
"""

import dataclasses
import datetime as dt
from collections import Counter
from decimal import Decimal
from typing import Any

from django.db import connection, transaction

from inventory.models import StockMovement
from inventory.selectors import STOCK_SUM_SQL
from orders.audit import Violation, audit_inventory
from orders.models import OrderCancelReason, OrderStatus
from payments.reporting import payments_for_report

PAID, PENDING, CANCELLED = OrderStatus.PAID.value, OrderStatus.PENDING_PAYMENT.value, OrderStatus.CANCELLED.value
TIMEOUT = OrderCancelReason.PAYMENT_TIMEOUT.value
RESERVE, CONSUME = StockMovement.Reason.RESERVE.value, StockMovement.Reason.CONSUME.value

PRODUCT_SQL = f"""
    SELECT p.id, p.sku, p.name, p.sale_starts_at, p.sale_ends_at, p.created_at, now(),
           stock.available_stock, stock.reserved_stock
      FROM products p {STOCK_SUM_SQL} WHERE p.id = %(product)s
"""
# The orders created since the opening that have a line of the product: one row each.
ORDERS_SQL = """
    SELECT o.id, o.status, o.cancel_reason, l.qty, l.qty * l.unit_price, o.currency
      FROM orders o JOIN order_lines l ON l.order_id = o.id AND l.product_id = %(product)s
     WHERE o.created_at >= %(since)s
"""
# The product's whole ledger, oldest first.
LEDGER_SQL = """
    SELECT id, created_at, available_delta, reserved_delta, reason, order_id
      FROM stock_movements WHERE product_id = %(product)s ORDER BY id
"""


@dataclasses.dataclass
class SaleReport:
    product_id: int
    sku: str
    name: str
    since: dt.datetime
    now: dt.datetime
    opening: dt.datetime
    sale_ends_at: dt.datetime | None
    orders: int = 0
    paid: int = 0
    expired: int = 0
    cancelled: int = 0
    pending: int = 0
    units_sold: int = 0
    units_sold_by_ledger: int = 0
    revenue: dict[str, Decimal] = dataclasses.field(default_factory=dict)  # currency -> paid lines' sum
    available_now: int = 0
    reserved_now: int = 0
    available_at_opening: int = 0
    sold_out_at: dt.datetime | None = None
    peak_orders_per_second: int = 0
    peak_at: dt.datetime | None = None
    payments: dict[str, Any] = dataclasses.field(default_factory=dict)  # payments.reporting.payments_for_report
    audit: list[Violation] = dataclasses.field(default_factory=list)
    # (time, units available after the row) from the opening on, and (second, orders created in it).
    available_series: list[tuple[dt.datetime, int]] = dataclasses.field(default_factory=list)
    orders_per_second: list[tuple[dt.datetime, int]] = dataclasses.field(default_factory=list)

    @property
    def seconds_to_sold_out(self) -> float | None:
        return None if self.sold_out_at is None else (self.sold_out_at - self.opening).total_seconds()


class ProductNotFound(LookupError):
    pass


def sale_report(*, product_id: int, since: dt.datetime | None = None) -> SaleReport:
    """The report of ``product_id``'s sale from ``since`` (default: its window's opening, else its first ledger
    row); one snapshot for every figure and for the audit."""
    outermost = not connection.in_atomic_block
    with transaction.atomic(), connection.cursor() as cursor:
        if outermost:  # one snapshot for every figure and the audit; inside a caller's transaction, the caller's
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cursor.execute(PRODUCT_SQL, {"product": product_id})
        row = cursor.fetchone()
        if row is None:
            raise ProductNotFound(product_id)
        pid, sku, name, starts_at, ends_at, created_at, now, available_now, reserved_now = row
        cursor.execute(LEDGER_SQL, {"product": product_id})
        ledger = cursor.fetchall()
        opening = since or starts_at or (ledger[0][1] if ledger else created_at)
        cursor.execute(ORDERS_SQL, {"product": product_id, "since": opening})
        orders = cursor.fetchall()
        report = SaleReport(
            product_id=pid,
            sku=sku,
            name=name,
            since=opening,
            now=now,
            opening=opening,
            sale_ends_at=ends_at,
            available_now=available_now,
            reserved_now=reserved_now,
        )
        _count_orders(report, orders)
        _walk_ledger(report, ledger, order_ids={row[0] for row in orders})
        report.audit = audit_inventory()  # inside this transaction: the same snapshot
        report.payments = payments_for_report(product_id, opening)
    return report


def _count_orders(report: SaleReport, orders: list[tuple[Any, ...]]) -> None:
    """Orders by status, units sold and revenue (ORDERS_SQL's rows)."""
    for _order_id, status, reason, qty, amount, currency in orders:
        report.orders += 1
        if status == PAID:
            report.paid += 1
            report.units_sold += qty
            report.revenue[currency] = report.revenue.get(currency, Decimal("0.00")) + amount
        elif status == PENDING:
            report.pending += 1
        elif status == CANCELLED and reason == TIMEOUT:
            report.expired += 1
        else:
            report.cancelled += 1


def _walk_ledger(report: SaleReport, ledger: list[tuple[Any, ...]], *, order_ids: set[int]) -> None:
    """Units available over time, sold out, orders per second and its peak, and the units the ledger says the
    report's orders consumed (LEDGER_SQL's rows, oldest first)."""
    available = 0
    per_second: Counter[dt.datetime] = Counter()
    for _id, at, available_delta, reserved_delta, reason, order_id in ledger:
        available += available_delta
        if at < report.opening:
            report.available_at_opening = available
            continue
        report.available_series.append((at, available))
        if report.sold_out_at is None and available == 0 and available_delta < 0:
            report.sold_out_at = at
        if reason == RESERVE:
            per_second[at.replace(microsecond=0)] += 1
        if reason == CONSUME and order_id in order_ids:
            report.units_sold_by_ledger += -reserved_delta
    report.orders_per_second = sorted(per_second.items())
    if per_second:
        report.peak_at, report.peak_orders_per_second = max(
            per_second.items(), key=lambda kv: (kv[1], -kv[0].timestamp())
        )


def write_png(report: SaleReport, path: str) -> None:
    """Two panels over the seconds since the opening: units available (a step line) and orders created per
    second (bars). matplotlib's Agg backend: no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    def seconds(at: dt.datetime) -> float:
        return (at - report.opening).total_seconds()

    end = max([report.now, *(at for at, _ in report.available_series)])
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.2), dpi=100, height_ratios=[3, 2])
    start_available = report.available_at_opening
    xs = [0.0] + [seconds(at) for at, _ in report.available_series] + [seconds(end)]
    ys = [start_available] + [n for _, n in report.available_series] + [report.available_now]
    top.step(xs, ys, where="post", color="#2e7d32", linewidth=1.8)
    top.set_ylabel("units available")
    top.set_ylim(bottom=0)
    if report.sold_out_at is not None:
        top.axvline(seconds(report.sold_out_at), color="#ba2121", linestyle="--", linewidth=1)
        top.annotate(
            f"sold out after {report.seconds_to_sold_out:.1f} s",
            (seconds(report.sold_out_at), top.get_ylim()[1] * 0.9),
            xytext=(6, 0),
            textcoords="offset points",
            color="#ba2121",
        )
    bottom.bar(
        [seconds(at) + 0.5 for at, _ in report.orders_per_second],
        [n for _, n in report.orders_per_second],
        width=0.9,
        color="#1565c0",
    )
    bottom.set_ylabel("orders / s")
    bottom.set_xlabel(f"seconds since the opening ({report.opening:%Y-%m-%d %H:%M:%S} UTC)")
    top.set_title(
        f"{report.name} (#{report.product_id}): {report.units_sold} sold, {report.paid} paid, "
        f"{report.expired} expired, {report.cancelled} cancelled"
    )
    for axis in (top, bottom):
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(True, color="#dddddd")
        axis.set_xlim(left=0)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
