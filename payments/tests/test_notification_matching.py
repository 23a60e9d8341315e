"""A gateway's notification pays only a transaction this shop issued (``gateway_transactions``), matched by the
whole id it gave the gateway; money for any other id pays no order and is recorded for ops (unmatched payments:
the sale board, ``sale_report``, ``reconcile_payments``), until ops resolve it in the admin.

The case that matters: order ids come again after a restore to a moment (or from another shop on the same gateway
account), and in a flash sale every order has the same total, so the amount check cannot tell two buyers apart."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from checkout.testing import place_order
from devtools.testing import assert_invariants
from inventory.permissions import ensure_ops_groups
from orders.models import Order
from payments.models import GatewayTransaction, PaymentAttempt, PaymentSession, UnmatchedPayment
from payments.reporting import unmatched_payments_open
from payments.tests.test_midtrans import NOTIFICATION_URL, notify, open_session, pay_link, reconcile, state


@pytest.fixture
def product(make_product):
    return make_product(stock=5, price="129000.00")


@pytest.fixture
def bob(api, fake, product, customer):
    """Bob's pending order, with its payment page open (a transaction issued at the gateway)."""
    order = place_order(customer=customer, items=[(product.pk, 1)])
    open_session(api, order)
    return order


def alice_paid(fake, bob, *, suffix="a11ce000", status="settlement"):
    """Alice's transaction: issued before a restore (or by another shop) under Bob's order id, paid with Bob's
    total. The gateway knows it; this shop has no record of it."""
    gateway_order_id = f"{bob.pk}-{suffix}"
    fake.pay(gateway_order_id=gateway_order_id, status=status, gross_amount=bob.total)
    return gateway_order_id


@pytest.mark.django_db
def test_money_for_a_transaction_the_shop_did_not_issue_pays_no_order_and_needs_ops(fake, bob, product, tmp_path):
    alice = alice_paid(fake, bob)
    assert not GatewayTransaction.objects.filter(gateway_order_id=alice).exists()

    answer = notify(fake.notification(gateway_order_id=alice))

    assert answer.status_code == 200 and answer.json() == {"status": "unmatched", "order_id": None}
    bob.refresh_from_db()
    assert bob.status == Order.Status.PENDING_PAYMENT
    assert list(PaymentAttempt.objects.values_list("status", "received_amount")) == [("pending", None)]
    [unmatched] = UnmatchedPayment.objects.all()
    assert (unmatched.gateway, unmatched.gateway_order_id, unmatched.amount, unmatched.currency) == (
        "midtrans",
        alice,
        bob.total,
        "IDR",
    )
    assert unmatched.resolved_at is None and unmatched.transaction_id.startswith("fake-tx-")

    # The gateway retries: nothing more is recorded.
    before = state()
    again = notify(fake.notification(gateway_order_id=alice))
    assert again.json() == {"status": "duplicate", "order_id": None}
    assert state() == before and UnmatchedPayment.objects.count() == 1

    # Ops see it: the sale board's and the report's definition, the sale report, reconcile_payments (exit 1).
    assert [row[2] for row in unmatched_payments_open()] == [alice]
    out = StringIO()
    call_command("sale_report", "--product", str(product.pk), "--png", str(tmp_path / "sale.png"), stdout=out)
    assert "unmatched money: 1 payment(s) for transactions this shop did not issue" in out.getvalue()
    code, output = reconcile()
    assert code == 1
    assert f"unmatched payment: 129000.00 IDR for midtrans transaction {alice} " in output
    assert "reconcile_payments: 0 mismatches since " in output and output.rstrip().endswith(", 1 unmatched payments")

    # Bob's own transaction still pays Bob.
    fake.pay(bob.pk, gross_amount=bob.total)
    paid = notify(fake.notification(bob.pk))
    assert paid.json() == {"status": "paid", "order_id": bob.pk}
    assert_invariants()


@pytest.mark.django_db
def test_the_bare_order_id_is_not_the_orders_transaction(fake, bob):
    """``<order>`` alone (the shape of ids before attempts were numbered) names no transaction of an order whose
    session the shop issued as ``<order>-<attempt>``: parsing the id would pay Bob."""
    fake.pay(gateway_order_id=str(bob.pk), gross_amount=bob.total)

    answer = notify(fake.notification(gateway_order_id=str(bob.pk)))

    assert answer.json() == {"status": "unmatched", "order_id": None}
    bob.refresh_from_db()
    assert bob.status == Order.Status.PENDING_PAYMENT


@pytest.mark.django_db
def test_an_unissued_transaction_that_moved_no_money_records_nothing(fake, bob):
    alice = alice_paid(fake, bob, status="pending")
    before = state()

    answer = notify(fake.notification(gateway_order_id=alice))

    assert answer.status_code == 200 and answer.json() == {"status": "ignored", "order_id": None}
    assert state() == before and not UnmatchedPayment.objects.exists()


@pytest.mark.django_db
def test_every_attempt_the_shop_issued_is_matched_even_one_whose_answer_was_lost(api, fake, product, customer):
    """Snap created the first attempt's transaction but its answer was lost; the buyer paid it anyway (a page
    opened before the answer was lost). It is this shop's transaction of this order: it pays the order."""
    order = place_order(customer=customer, items=[(product.pk, 1)])
    link = pay_link(api, order)
    fake.lose_answer()
    assert Client().get(link).status_code == 503
    assert Client().get(link).status_code == 302
    first, second = fake.snap_order_ids
    issued = set(GatewayTransaction.objects.filter(order=order).values_list("gateway_order_id", flat=True))
    assert issued == {first, second}
    assert PaymentSession.objects.get(order=order).gateway_order_id == second

    fake.pay(gateway_order_id=first, gross_amount=order.total)
    answer = notify(fake.notification(gateway_order_id=first))

    assert answer.json() == {"status": "paid", "order_id": order.pk}


@pytest.mark.django_db
def test_a_session_stored_before_ids_were_numbered_is_still_matched(fake, product, customer):
    """A session stored with no gateway order id was created at the gateway under the bare order id; the migration
    that introduced ``gateway_transactions`` recorded it there under that id."""
    order = place_order(customer=customer, items=[(product.pk, 1)])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO payment_sessions (order_id, gateway, redirect_url, ends_at) VALUES (%s, 'midtrans', %s, "
            "now() + interval '5 minutes')",
            [order.pk, f"{fake.base_url}/snap/v4/redirection/old"],
        )
        # What the migration's copy does for every stored session.
        cursor.execute(
            "INSERT INTO gateway_transactions (gateway_order_id, order_id, gateway, created_at) "
            "SELECT COALESCE(NULLIF(gateway_order_id, ''), order_id::text), order_id, gateway, created_at "
            "FROM payment_sessions"
        )
    fake.pay(gateway_order_id=str(order.pk), gross_amount=order.total)

    answer = notify(fake.notification(gateway_order_id=str(order.pk)))

    assert answer.json() == {"status": "paid", "order_id": order.pk}


@pytest.mark.django_db
def test_ops_resolve_an_unmatched_payment_in_the_admin_and_reconciliation_is_clean(client, fake, bob):
    alice = alice_paid(fake, bob)
    notify(fake.notification(gateway_order_id=alice))
    [unmatched] = UnmatchedPayment.objects.all()
    viewer = get_user_model().objects.create_user(username="viewer", password="pw", is_staff=True)
    ensure_ops_groups()["ops_viewers"].user_set.add(viewer)
    manager = get_user_model().objects.create_user(username="manager", password="pw", is_staff=True)
    ensure_ops_groups()["stock_managers"].user_set.add(manager)
    url = reverse("admin:payments_unmatchedpayment_changelist")
    action = {"action": "resolve", "_selected_action": [unmatched.pk]}

    client.force_login(viewer)
    assert client.get(url).status_code == 200
    client.post(url, action)  # a viewer has no such action: nothing changes
    unmatched.refresh_from_db()
    assert unmatched.resolved_at is None

    client.force_login(manager)
    assert client.post(url, action).status_code == 302
    unmatched.refresh_from_db()
    assert unmatched.resolved_at is not None and unmatched.resolved_by == "manager"
    assert unmatched_payments_open() == []
    code, output = reconcile()
    assert code == 0 and output.rstrip().endswith(", 0 unmatched payments")


@pytest.mark.django_db
def test_a_signed_notification_with_an_id_midtrans_would_not_issue_is_400_and_asks_nothing(fake, bob):
    fake.pay(gateway_order_id="9" * 51, gross_amount=bob.total)
    body = fake.notification(gateway_order_id="9" * 51)
    before, asked = state(), list(fake.requests)

    answer = Client().post(NOTIFICATION_URL, body, "application/json")

    assert answer.status_code == 400 and answer.json()["code"] == "invalid_request"
    assert state() == before and fake.requests == asked
