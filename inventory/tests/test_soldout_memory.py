"""The per-process sold-out memory (``inventory.soldout``): it refuses early for at most 250 ms, and never sells."""

import pytest

from checkout.testing import place_order
from devtools.testing import run_concurrently
from inventory import soldout
from inventory.exceptions import StockConflict
from inventory.models import Inventory, StockBucket
from orders.models import Order

pytestmark = pytest.mark.django_db


class FakeClock:
    """Test-only: this process's monotonic clock, advanced by hand (the memory decides nothing about orders)."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch, settings):
    settings.SOLD_OUT_CACHE_MS = 250
    fake = FakeClock()
    monkeypatch.setattr(soldout, "clock", fake)
    return fake


def checkout_status(customer, product, qty=1):
    try:
        place_order(customer=customer, items=[(product.pk, qty)])
    except StockConflict:
        return 409
    return 201


def statements(captured):
    """What reached the database, without the SAVEPOINT bookkeeping of the test's own transaction."""
    return [q["sql"] for q in captured if "SAVEPOINT" not in q["sql"]]


def test_a_sold_out_product_is_refused_without_a_query_then_sold_again_after_the_window(clock, make_product, customer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from inventory import services as inventory_services

    product = make_product(stock=0)
    assert checkout_status(customer, product) == 409  # the database said so; remembered now

    with CaptureQueriesContext(connection) as captured:
        assert checkout_status(customer, product) == 409
    assert statements(captured) == []

    inventory_services.stock_adjust(product_id=product.pk, delta=1, note="restock")
    clock.now += 0.2  # inside the window: still refused (stale by at most 250 ms, documented)
    assert checkout_status(customer, product) == 409
    clock.now += 0.051  # past 250 ms: the database decides again, and the unit is sold
    assert checkout_status(customer, product) == 201
    assert Inventory.objects.get(pk=product.pk).reserved_stock == 1


def test_the_memory_refuses_only_what_exceeds_the_seen_stock(clock, make_product, customer):
    product = make_product(stock=2)
    assert checkout_status(customer, product, qty=3) == 409  # saw at most 2 available
    assert checkout_status(customer, product, qty=2) == 201  # 2 is not refused by the memory
    assert checkout_status(customer, product, qty=1) == 409


def test_the_window_is_never_longer_than_250_ms(clock, settings, make_product, customer):
    settings.SOLD_OUT_CACHE_MS = 60_000
    product = make_product(stock=0)
    assert checkout_status(customer, product) == 409
    StockBucket.objects.filter(pk=product.pk, bucket=0).update(available_stock=0)  # nothing changes
    from inventory import services as inventory_services

    inventory_services.stock_adjust(product_id=product.pk, delta=1, note="restock")
    clock.now += 0.251
    assert checkout_status(customer, product) == 201


def test_off_when_set_to_zero(settings, make_product, customer):
    settings.SOLD_OUT_CACHE_MS = 0
    product = make_product(stock=0)
    assert checkout_status(customer, product) == 409
    assert soldout.known_short({product.pk: 1}) == []


def test_remembering_can_never_sell_a_unit_that_is_not_there(clock):
    """The memory has no way to say yes: whatever it was told, it only ever names products to refuse."""
    soldout.remember_short(7, available_at_most=5)
    assert soldout.known_short({7: 5}) == []  # not refused, and not "allowed" either: the database decides
    assert soldout.known_short({7: 6}) == [7]


@pytest.mark.django_db(transaction=True)
def test_flash_sale_with_the_memory_on_still_sells_exactly_the_stock(settings, make_product, make_customer):
    """Stock 1, 100 buyers, the memory on as in production: exactly one order, 99 conflicts, nothing negative."""
    settings.SOLD_OUT_CACHE_MS = 250
    product = make_product(stock=1)
    buyers = [make_customer() for _ in range(100)]

    outcomes = run_concurrently(100, lambda i: checkout_status(buyers[i], product))

    assert [o.error for o in outcomes if o.error] == []
    assert sorted(o.value for o in outcomes) == [201] + [409] * 99
    inventory = Inventory.objects.get(pk=product.pk)
    assert (inventory.available_stock, inventory.reserved_stock) == (0, 1)
    assert Order.objects.filter(lines__product=product).count() == 1
