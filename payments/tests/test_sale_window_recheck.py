"""The sale window is decided again where the order is written: the quote judges the window with the
transaction's start (``now()``), and every wait after it (the customer's lock, up to DB_LOCK_TIMEOUT_MS each) used to
let a sale-price order be written after ``sale_ends_at``. ORDER_SQL now writes nothing once a product's window has
closed by its own ``statement_timestamp()``, so an order's ``created_at`` is always before ``sale_ends_at`` and only
the last statement's own wait (the stock row, then COMMIT) can separate the commit from it (docs/sale-windows.md).

Deterministic: the checkout is held on the customer's lock after its quote's snapshot saw the window open, the sale
is ended meanwhile, then the lock is released (+ control: the INSERT without the re-check writes the sale-price
order after the end)."""

import re
import threading
from decimal import Decimal

import pytest
from django.db import connection, transaction

from checkout import services as checkout
from checkout.testing import place
from devtools.testing import ThreadRun, assert_invariants, wait_for_lock_waiters
from inventory.exceptions import SaleEnded
from inventory.models import Product
from inventory.tests.test_sale_window import set_window
from orders.models import Order
from skincare.locks import advisory_key

RECHECK = re.compile(r"\n\s*-- The sale window decided again.*?statement_timestamp\(\)\)\n", re.S)


def checkout_held_past_the_end(customer, product):  # type: ignore[no-untyped-def]
    """Start a checkout that quotes while the window is open, hold it on the customer's lock while ops end the sale
    (sale_ends_at = the database clock), then let it go on; returns its outcome."""
    holding, release = threading.Event(), threading.Event()

    def hold_the_customer_lock() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key("customer_checkout", customer.pk)])
            holding.set()
            release.wait(60)

    holder = ThreadRun(hold_the_customer_lock, name="customer-lock-holder")
    assert holding.wait(30)
    buyer = ThreadRun(lambda: place(customer=customer, items=[(product.pk, 1)]), name="buyer")
    wait_for_lock_waiters(1)  # the buyer's quote has run its snapshot (window open) and waits for the lock
    with connection.cursor() as cursor:  # ops end the sale now, by the database clock
        cursor.execute("UPDATE products SET sale_ends_at = clock_timestamp() WHERE id = %s", [product.pk])
    release.set()
    assert holder.join().error is None
    return buyer.join()


@pytest.mark.django_db(transaction=True)
def test_no_order_is_written_once_the_window_closed_while_the_checkout_waited(make_product, make_customer):  # type: ignore[no-untyped-def]
    product, customer = make_product(stock=5, price="129.00"), make_customer()
    set_window(product, starts_in=-60, ends_in=3600, price="99.00")

    outcome = checkout_held_past_the_end(customer, product)

    assert isinstance(outcome.error, SaleEnded), outcome.error
    assert outcome.error.product_ids == [product.pk]
    assert Order.objects.count() == 0
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_without_the_recheck_a_sale_price_order_is_written_after_the_end(  # type: ignore[no-untyped-def]
    make_product, make_customer, monkeypatch
):
    product, customer = make_product(stock=5, price="129.00"), make_customer()
    set_window(product, starts_in=-60, ends_in=3600, price="99.00")
    naive = RECHECK.sub("\n", checkout.ORDER_SQL)
    assert naive != checkout.ORDER_SQL
    monkeypatch.setattr(checkout, "ORDER_SQL", naive)

    outcome = checkout_held_past_the_end(customer, product)

    assert outcome.error is None
    order = Order.objects.get()
    ends_at = Product.objects.get(pk=product.pk).sale_ends_at
    assert order.created_at > ends_at
    assert order.lines.get().unit_price == Decimal("99.00")  # the sale price, after the sale
