"""One live gateway transaction per order: a new attempt is created only once every earlier one is known closed at
the gateway (absent, failed, expired by the shop, or its money applied), and the sweeper, every cancel and
reconciliation ask about every transaction the order ever had, not only the stored page's."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from checkout.testing import place_order
from devtools.testing import assert_invariants, make_overdue
from orders.models import Order
from payments import sessions
from payments.models import GatewayTransaction, PaymentSession
from payments.tests.test_midtrans import pay_link, reconcile


@pytest.fixture
def order(make_product, customer):
    return place_order(customer=customer, items=[(make_product(stock=5, price="129000.00").pk, 1)])


def two_attempts(api, fake, order, *, first_status):
    """The first attempt's Snap answer is lost (the transaction exists at the gateway with ``first_status``; the
    buyer may have its page); the visit answered 503. Returns (link, first id)."""
    link = pay_link(api, order)
    fake.lose_answer()
    assert Client().get(link).status_code == 503
    [first] = fake.snap_order_ids
    fake.pay(gateway_order_id=first, status=first_status, gross_amount=order.total)
    return link, first


def closed(gateway_order_id):
    return GatewayTransaction.objects.get(gateway_order_id=gateway_order_id).closed_at is not None


@pytest.mark.django_db
def test_a_new_attempt_is_created_only_after_the_earlier_one_is_closed_at_the_gateway(api, fake, order):
    link, first = two_attempts(api, fake, order, first_status="pending")

    retry = Client().get(link)

    assert retry.status_code == 302
    second = PaymentSession.objects.get(order=order).gateway_order_id
    snap_at = fake.requests.index(("POST", "/snap/v1/transactions"), 1)  # the retry's Snap call
    assert ("POST", f"/v2/{first}/expire") in fake.requests[:snap_at]
    assert fake.transactions[first]["transaction_status"] == "expire" and closed(first)
    assert not closed(second)


@pytest.mark.django_db
def test_control_without_closing_the_earlier_attempt_two_transactions_are_live(api, fake, order, monkeypatch):
    monkeypatch.setattr(sessions, "_earlier_attempts_close", lambda gw, *, order_id, keep: None)
    link, first = two_attempts(api, fake, order, first_status="pending")

    assert Client().get(link).status_code == 302

    assert fake.transactions[first]["transaction_status"] == "pending"  # still payable: two live pages


@pytest.mark.django_db
def test_an_earlier_attempt_that_was_paid_pays_the_order_and_no_new_page_is_made(api, fake, order):
    link, first = two_attempts(api, fake, order, first_status="settlement")

    retry = Client().get(link)

    assert retry.status_code == 409 and retry.json()["code"] == "order_not_pending"
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert fake.snap_order_ids == [first] and closed(first)
    assert_invariants()


@pytest.mark.django_db
def test_the_sweeper_asks_about_every_transaction_the_order_had(api, fake, order):
    """The buyer paid on the first page (its notification lost), a second page was opened later: the sweeper finds
    the money on the first and pays the order, and expires the second."""
    link, first = two_attempts(api, fake, order, first_status="pending")
    assert Client().get(link).status_code == 302
    second = PaymentSession.objects.get(order=order).gateway_order_id
    fake.transactions[first]["transaction_status"] = "settlement"  # paid on the first page after all
    fake.pay(gateway_order_id=second, status="pending", gross_amount=order.total)
    GatewayTransaction.objects.filter(gateway_order_id=first).update(closed_at=None)  # not known closed
    make_overdue(order)

    out = StringIO()
    call_command("expire_reservations", stdout=out)

    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert fake.transactions[second]["transaction_status"] == "expire"
    assert closed(first) and closed(second)
    assert_invariants()


@pytest.mark.django_db
def test_reconciliation_asks_about_every_transaction_and_a_second_settlement_is_a_refund(api, fake, order):
    link, first = two_attempts(api, fake, order, first_status="pending")
    assert Client().get(link).status_code == 302
    second = PaymentSession.objects.get(order=order).gateway_order_id
    fake.pay(gateway_order_id=second, gross_amount=order.total)
    assert Client().post(
        "/v1/payments/midtrans/notification", fake.notification(gateway_order_id=second), "application/json"
    ).json() == {"status": "paid", "order_id": order.pk}
    fake.transactions[first]["transaction_status"] = "settlement"  # the expired first page took money after all

    code, output = reconcile()

    assert code == 1
    assert f"order {order.pk}: refund_to_make: settled there (129000.00 IDR, transaction {first})" in output


@pytest.mark.django_db
def test_a_cancel_closes_every_transaction_the_order_has_open(api, fake, order):
    link, first = two_attempts(api, fake, order, first_status="pending")
    GatewayTransaction.objects.filter(gateway_order_id=first).update(closed_at=None)
    assert Client().get(link).status_code == 302
    second = PaymentSession.objects.get(order=order).gateway_order_id
    fake.pay(gateway_order_id=second, status="pending", gross_amount=order.total)
    GatewayTransaction.objects.filter(gateway_order_id=first).update(closed_at=None)
    fake.transactions[first]["transaction_status"] = "pending"

    assert api.post(f"/v1/orders/{order.pk}/cancel").status_code == 200

    assert {fake.transactions[i]["transaction_status"] for i in (first, second)} == {"expire"}
    assert closed(first) and closed(second)
