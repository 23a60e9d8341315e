"""The sale report's sums, each counted on its own: revenue is the product's own paid lines (an order with several
products counts once per product, for its line only), and every payment that needs ops is listed: refunds to make,
late payments, and amount or currency mismatches."""

from decimal import Decimal

import pytest

from backoffice.sale_report import sale_report
from checkout.testing import place_order
from devtools.testing import make_overdue
from payments import services as payment_services

pytestmark = pytest.mark.django_db


def pay(order, event_id, *, amount=None, currency=None):
    return payment_services.payment_event_apply(
        event_id=event_id,
        event_type=payment_services.EVENT_SUCCEEDED,
        order_id=order.pk,
        amount=order.total if amount is None else amount,
        currency=order.currency if currency is None else currency,
    )


def test_revenue_is_the_products_own_lines_of_each_paid_order(make_product, make_customer):
    serum = make_product(stock=10, price="10.00")
    cream = make_product(stock=10, price="50.00")
    both = place_order(customer=make_customer(), items=[(serum.pk, 2), (cream.pk, 1)])  # 20 + 50
    alone = place_order(customer=make_customer(), items=[(serum.pk, 1)])  # 10
    unpaid = place_order(customer=make_customer(), items=[(serum.pk, 3), (cream.pk, 2)])
    assert pay(both, "evt-both") == pay(alone, "evt-alone") == "paid"

    serums, creams = sale_report(product_id=serum.pk), sale_report(product_id=cream.pk)

    assert (serums.revenue, serums.units_sold, serums.paid, serums.pending) == ({"IDR": Decimal("30.00")}, 3, 2, 1)
    assert (creams.revenue, creams.units_sold, creams.paid, creams.pending) == ({"IDR": Decimal("50.00")}, 1, 1, 1)
    assert (
        serums.revenue["IDR"] + creams.revenue["IDR"] == both.total + alone.total
    )  # each paid order's money counted once
    assert unpaid.total == Decimal("130.00")
    assert serums.audit == creams.audit == []


def test_every_payment_that_needs_ops_is_listed(make_product, make_customer):
    product = make_product(stock=10, price="10.00")
    late, short, foreign, fine = (place_order(customer=make_customer(), items=[(product.pk, 1)]) for _ in range(4))
    make_overdue(late)
    assert pay(late, "evt-late") == "refund_required"  # money for an expired order
    assert pay(short, "evt-short", amount="9.00") == "amount_mismatch"
    assert pay(foreign, "evt-foreign", currency="JPY") == "currency_mismatch"
    assert pay(fine, "evt-fine") == "paid"

    report = sale_report(product_id=product.pk)

    assert report.payments == {
        "late_payments": 1,
        "refunds_to_make": 1,
        "refund_amount": {"IDR": Decimal("10.00")},
        "mismatches": 2,  # the wrong amount and the wrong currency: both ops' to settle
        "to_reconcile": 0,  # no gateway session was left unanswered
        "unmatched": 0,  # no money arrived for a transaction the shop did not issue
    }
    assert report.audit == []
