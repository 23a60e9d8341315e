"""``manage.py sale_report`` after a sale of checkouts, payments, a cancel, expiries and a late payment: every
figure equals what the orders, reservations, payment attempts and the stock ledger say when counted on their own,
and the audit (orders.audit) is clean. With ``SKINCARE_SCREENSHOT_DIR`` set, the picture is saved there as
``sale-report.png`` (the one in the README: ``SKINCARE_SCREENSHOT_DIR=docs/img pytest backoffice/tests/test_sale_report.py``).
"""

import io
import os
import re
import shutil
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import F, Sum

from backoffice.sale_report import sale_report
from checkout.testing import buy, is_order
from devtools.testing import assert_invariants, make_overdue, wait_until
from inventory.models import Inventory, StockMovement
from orders import services as order_services
from orders.models import Order, OrderLine, Reservation
from payments import services as payment_services
from payments.models import PaymentAttempt

pytestmark = pytest.mark.django_db(transaction=True)


def db_second():
    with connection.cursor() as cursor:
        cursor.execute("SELECT floor(extract(epoch FROM now()))::bigint")
        return cursor.fetchone()[0]


def next_second():
    """Until the database clock is in the next whole second (the waves land in separate seconds)."""
    start = db_second()
    wait_until(lambda: db_second() > start, timeout=5, what="the next second")


def pay(order, event="evt"):
    return payment_services.payment_event_apply(
        event_id=f"{event}-{order.pk}",
        event_type="payment.succeeded",
        order_id=order.pk,
        amount=order.total,
        currency=settings.SHOP_CURRENCY,
    )


def run_report(*args):
    out = io.StringIO()
    call_command("sale_report", *args, stdout=out)
    return out.getvalue()


def figure(text, label):
    return re.search(rf"^  {label}:\s+(.*)$", text, re.M).group(1)


def test_the_report_is_exact_against_orders_ledger_and_audit(make_product, make_customer, tmp_path):
    product = make_product(stock=20, price="129000.00", name="Niacinamide 10% Serum (flash sale)")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE products SET sale_starts_at = now(), sale_ends_at = now() + interval '1 hour', "
            "sale_price = 99000 WHERE id = %s",
            [product.pk],
        )
    orders, refused = [], 0
    # Waves of buyers in successive seconds: 3, 8, 6, 5 (20 units: the fourth wave sells out, 2 refused).
    for size in (3, 8, 6, 5):
        next_second()
        for _ in range(size):
            outcome = buy(make_customer(), [(product.pk, 1)])
            if is_order(outcome):
                orders.append(outcome)
            else:
                assert outcome == "conflict"
                refused += 1
    assert (len(orders), refused) == (20, 2)
    for order in orders[:12]:
        assert pay(order) == "paid"
    order_services.order_cancel(order_id=orders[12].pk)  # the customer cancels: 1 unit back
    for order in orders[13:16]:
        make_overdue(order)
    call_command("expire_reservations", verbosity=0)  # 3 expired: 3 units back
    make_overdue(orders[16])
    assert pay(orders[16]) == "refund_required"  # paid after its deadline: expired, money to return
    next_second()
    late_buyers = [buy(make_customer(), [(product.pk, 1)]) for _ in range(6)]  # 5 units back, 6 buyers
    assert sum(map(is_order, late_buyers)) == 5
    for order in [o for o in late_buyers if is_order(o)][:2]:
        assert pay(order) == "paid"

    short = orders[17]  # a payment of the wrong amount: recorded for ops, the order stays pending
    mismatch = payment_services.payment_event_apply(
        event_id=f"evt-short-{short.pk}",
        event_type="payment.succeeded",
        order_id=short.pk,
        amount=short.total - 1,
        currency=settings.SHOP_CURRENCY,
    )
    assert mismatch == "amount_mismatch"

    png = tmp_path / "report.png"
    text = run_report("--product", str(product.pk), "--png", str(png))
    print(text)  # shown with -s, and on failure

    # Each figure, counted independently.
    mine = Order.objects.filter(lines__product=product)
    paid_lines = OrderLine.objects.filter(product=product, order__status=Order.Status.PAID)
    units_sold = paid_lines.aggregate(n=Sum("qty"))["n"]
    revenue = paid_lines.aggregate(r=Sum(F("qty") * F("unit_price")))["r"]
    consumed = -StockMovement.objects.filter(product=product, reason="consume").aggregate(n=Sum("reserved_delta"))["n"]
    consumed_reservations = Reservation.objects.filter(product=product, status="consumed").aggregate(n=Sum("qty"))["n"]
    assert units_sold == consumed == consumed_reservations == 14
    assert figure(text, "units sold") == f"{units_sold} (stock ledger: {consumed} consumed)"
    assert revenue == Decimal("99000.00") * 14
    assert figure(text, "revenue") == f"{revenue:.2f} {settings.SHOP_CURRENCY}"
    counts = {
        "paid": mine.filter(status="paid").count(),
        "expired": mine.filter(status="cancelled", cancel_reason="payment_timeout").count(),
        "cancelled": mine.filter(status="cancelled").exclude(cancel_reason="payment_timeout").count(),
        "pending": mine.filter(status="pending_payment").count(),
    }
    assert counts == {"paid": 14, "expired": 4, "cancelled": 1, "pending": 6}
    assert figure(text, "orders") == (
        f"{mine.count()} created: {counts['paid']} paid, {counts['expired']} expired, "
        f"{counts['cancelled']} cancelled, {counts['pending']} still pending"
    )
    refunds = PaymentAttempt.objects.filter(order__lines__product=product, status="refund_required")
    assert refunds.count() == 1
    assert PaymentAttempt.objects.filter(order__lines__product=product, status="amount_mismatch").count() == 1
    assert figure(text, "late payments") == (
        f"1; refunds to make: 1 totalling {refunds.get().received_amount:.2f} {settings.SHOP_CURRENCY}; amount or "
        "currency mismatches: "
        f"{PaymentAttempt.objects.filter(order__lines__product=product, status='amount_mismatch').count()}"
    )
    per_second = Counter(at.replace(microsecond=0) for at in mine.values_list("created_at", flat=True))
    peak = max(per_second.values())
    assert peak == 8
    assert figure(text, "peak").startswith("8 orders/s at ")
    sold_out = re.match(r"([\d.]+) s after the opening", figure(text, "sold out"))
    assert sold_out and 2.0 <= float(sold_out.group(1)) < 10
    inventory = Inventory.objects.get(product=product)
    assert (
        figure(text, "now")
        == f"{inventory.available_stock} available, {inventory.reserved_stock} held by unpaid orders"
    )
    assert (inventory.available_stock, inventory.reserved_stock) == (0, 6)
    assert figure(text, "audit") == "clean (same snapshot)"
    assert_invariants()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --since after everything: nothing counted; a bad --since or product is a clear error.
    later = run_report("--product", str(product.pk), "--since", "2999-01-01T00:00:00", "--png", str(png))
    assert figure(later, "orders").startswith("0 created")
    with pytest.raises(CommandError, match="not an ISO 8601"):
        run_report("--product", str(product.pk), "--since", "yesterday")
    with pytest.raises(CommandError, match="no product 999999"):
        run_report("--product", "999999")

    screenshot_dir = os.environ.get("SKINCARE_SCREENSHOT_DIR")
    if screenshot_dir:
        run_report("--product", str(product.pk), "--png", str(png))
        shutil.copy(png, Path(screenshot_dir) / "sale-report.png")


def test_the_report_refuses_figures_the_audit_does_not_vouch_for(make_product, tmp_path):
    """Control: a ledger row nobody's counters agree with (written behind the services' back) fails the report."""
    product = make_product(stock=2)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO stock_movements (product_id, bucket, available_delta, reserved_delta, reason, note, created_at)"
            " VALUES (%s, 0, 5, 0, 'restock', 'tampered', now())",
            [product.pk],
        )
    png = tmp_path / "report.png"
    out = io.StringIO()
    with pytest.raises(CommandError, match="the audit found"):
        call_command("sale_report", "--product", str(product.pk), "--png", str(png), stdout=out)
    assert "AUDIT" in out.getvalue()
    assert "units sold" not in out.getvalue() and not png.exists()  # no figure, no picture


def test_revenue_is_one_sum_per_currency_never_added_across(make_product, make_customer, tmp_path):
    """Two paid orders, one in the shop's currency and one stamped in another (a shop that changed SHOP_CURRENCY
    between sales): the report shows each currency's own sum, never 100 + 100 of two money units as 200."""
    product = make_product(stock=5, price="100.00")
    first, second = (buy(make_customer(), [(product.pk, 1)]) for _ in range(2))
    assert pay(first) == "paid"
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders SET currency = 'USD' WHERE id = %s", [second.pk])
    second.refresh_from_db()
    paid = payment_services.payment_event_apply(
        event_id=f"evt-usd-{second.pk}",
        event_type="payment.succeeded",
        order_id=second.pk,
        amount=second.total,
        currency="USD",
    )
    assert paid == "paid"

    report = sale_report(product_id=product.pk)
    text = run_report("--product", str(product.pk), "--png", str(tmp_path / "report.png"))

    assert report.revenue == {settings.SHOP_CURRENCY: Decimal("100.00"), "USD": Decimal("100.00")}
    assert figure(text, "revenue") == f"100.00 {settings.SHOP_CURRENCY}, 100.00 USD"


def test_refunds_are_one_sum_per_currency_never_added_across(make_product, make_customer, tmp_path):
    """Two late payments (money for expired orders), one in the shop's currency and one for an order stamped in
    another: the refunds to make are listed per currency, never 100 + 100 of two money units as 200."""
    product = make_product(stock=5, price="100.00")
    first, second = (buy(make_customer(), [(product.pk, 1)]) for _ in range(2))
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders SET currency = 'USD' WHERE id = %s", [second.pk])
    for order in (first, second):
        order.refresh_from_db()
        make_overdue(order)
        late = payment_services.payment_event_apply(
            event_id=f"evt-late-{order.pk}",
            event_type="payment.succeeded",
            order_id=order.pk,
            amount=order.total,
            currency=order.currency,
        )
        assert late == "refund_required"

    report = sale_report(product_id=product.pk)
    text = run_report("--product", str(product.pk), "--png", str(tmp_path / "report.png"))

    assert report.payments["refund_amount"] == {settings.SHOP_CURRENCY: Decimal("100.00"), "USD": Decimal("100.00")}
    assert figure(text, "late payments") == (
        f"2; refunds to make: 2 totalling 100.00 {settings.SHOP_CURRENCY}, 100.00 USD; amount or currency mismatches: 0"
    )
