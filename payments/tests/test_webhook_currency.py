"""A payment is checked against the currency its order was written in, not the shop's current SHOP_CURRENCY: an
order placed before the shop changed currency is paid in its own currency, and money in the new one is a
currency mismatch for ops."""

import pytest

from checkout.testing import place_order
from devtools.testing import assert_invariants
from orders.models import Order
from payments import services
from payments.models import PaymentAttempt

pytestmark = pytest.mark.django_db


def pay(order, currency, event_id):
    return services.payment_event_apply(
        event_id=event_id,
        event_type=services.EVENT_SUCCEEDED,
        order_id=order.pk,
        amount=order.total,
        currency=currency,
    )


def test_an_order_is_paid_in_its_own_currency_after_the_shop_changed_currency(make_product, customer, settings):
    product = make_product(stock=10, price="12.50")
    settings.SHOP_CURRENCY = "IDR"
    older, other = (place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(2))
    assert older.currency == other.currency == "IDR"

    settings.SHOP_CURRENCY = "USD"  # the shop moved on; these orders were written in IDR

    assert pay(older, "IDR", "evt-own-currency") == "paid"
    assert pay(other, "USD", "evt-new-currency") == "currency_mismatch"
    assert Order.objects.get(pk=older.pk).status == "paid"
    assert Order.objects.get(pk=other.pk).status == "pending_payment"
    assert PaymentAttempt.objects.get(order=other).received_currency == "USD"
    assert_invariants()
