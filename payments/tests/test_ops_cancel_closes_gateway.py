"""Every cancel closes the gateway side, not only the customer's: the admin's Cancel action and ``flash_sale_setup``
expire the order's Midtrans transaction once the cancel has committed (no answer: marked for reconcile_payments), so
the buyer cannot pay a cancelled order on a page that is still open."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from checkout.testing import place_order
from orders.models import Order
from payments.models import PaymentSession
from payments.tests.test_midtrans import open_session


@pytest.fixture
def pending(api, fake, make_product, customer):
    """A pending order whose Snap page is open and not yet paid."""
    product = make_product(stock=5, price="129000.00")
    order = place_order(customer=customer, items=[(product.pk, 1)])
    open_session(api, order)
    fake.pay(order.pk, gross_amount=order.total, status="pending")
    return order


def admin_cancel(admin_client, order):
    url = reverse("admin:orders_order_changelist")
    return admin_client.post(url, {"action": "cancel_orders", "_selected_action": [order.pk]})


def closed_at_the_gateway(fake, order):
    gateway_order_id = PaymentSession.objects.get(order=order).gateway_order_id
    return fake.transactions[gateway_order_id]["transaction_status"] == "expire"


@pytest.mark.django_db
def test_the_admins_cancel_closes_the_gateway_transaction(admin_client, fake, pending):
    assert admin_cancel(admin_client, pending).status_code == 302

    pending.refresh_from_db()
    assert (pending.status, pending.cancel_reason) == ("cancelled", "ops_cancelled")
    assert closed_at_the_gateway(fake, pending)
    assert not PaymentSession.objects.get(order=pending).needs_reconciliation


@pytest.mark.django_db
def test_the_admins_cancel_while_the_gateway_is_down_still_cancels_and_is_marked(admin_client, fake, pending):
    fake.stall("expire")

    assert admin_cancel(admin_client, pending).status_code == 302

    pending.refresh_from_db()
    assert pending.status == "cancelled"
    assert not closed_at_the_gateway(fake, pending)
    assert PaymentSession.objects.get(order=pending).needs_reconciliation


@pytest.mark.django_db
def test_flash_sale_setup_closes_the_gateway_transaction_of_every_order_it_cancels(fake, pending):
    product_id = pending.lines.get().product_id
    call_command("flash_sale_setup", "--product", str(product_id), "--stock", "5", stdout=StringIO())

    pending.refresh_from_db()
    assert (pending.status, pending.cancel_reason) == ("cancelled", "ops_cancelled")
    assert closed_at_the_gateway(fake, pending)


@pytest.mark.django_db
def test_an_ops_cancel_of_an_order_without_a_payment_page_asks_the_gateway_nothing(
    admin_client, fake, make_product, customer
):
    order = place_order(customer=customer, items=[(make_product(stock=5).pk, 1)])

    assert admin_cancel(admin_client, order).status_code == 302

    assert Order.objects.get(pk=order.pk).status == "cancelled"
    assert fake.requests == []
