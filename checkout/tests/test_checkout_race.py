"""Flash-sale races at the service level: real threads, one connection each, released by a barrier.

Every test here runs once per inventory strategy (the ``inventory_strategy`` fixture below), with buyers that
retry ``lock_busy``/``busy`` answers as a client honouring ``Retry-After`` would (``checkout.testing``)."""

import random
import threading

import pytest
from django.db import connection, transaction

from checkout.testing import RACE_CASES, buy_retrying
from devtools.testing import assert_invariants, run_concurrently
from inventory.models import Inventory, StockBucket
from orders.models import Order, Reservation
from skincare.errors import ServiceBusy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=RACE_CASES)
def inventory_strategy(request):
    return request.param


def checkout_or_conflict(customer, items):
    return buy_retrying(customer, items)


def test_stock_one_hundred_buyers_exactly_one_wins(make_product, make_customer):
    product = make_product(stock=1)
    buyers = [make_customer() for _ in range(100)]

    outcomes = run_concurrently(100, lambda i: checkout_or_conflict(buyers[i], [(product.pk, 1)]))

    errors = [o.error for o in outcomes if o.error is not None]
    assert errors == []
    created = [o.value for o in outcomes if isinstance(o.value, Order)]
    conflicts = [o.value for o in outcomes if o.value == "conflict"]
    assert (len(created), len(conflicts)) == (1, 99)
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (0, 1)
    assert Reservation.objects.filter(product=product, status="active").count() == 1
    assert Order.objects.count() == 1  # the losers' orders were rolled back with their transactions
    assert_invariants()


def test_stock_n_random_quantities_never_reserve_more_than_n(make_product, make_customer, inventory_strategy):
    stock = 25
    product = make_product(stock=stock)
    buyers = [make_customer() for _ in range(60)]
    rng = random.Random(20261129)
    quantities = [rng.randint(1, 4) for _ in buyers]

    outcomes = run_concurrently(60, lambda i: checkout_or_conflict(buyers[i], [(product.pk, quantities[i])]))

    assert [o.error for o in outcomes if o.error] == []
    won = sum(quantities[o.index] for o in outcomes if isinstance(o.value, Order))
    inventory = Inventory.objects.get(product=product)
    assert won <= stock
    assert inventory.reserved_stock == won
    assert inventory.available_stock == stock - won
    # Every loser lost for a reason: by the time it ran, fewer units were left than it asked for. (An optimistic
    # buyer may also give up after its bounded retries while units remain: that strategy's documented failure mode.)
    assert all(o.value in ("conflict", "gave_up") or isinstance(o.value, Order) for o in outcomes)
    if inventory_strategy != "optimistic":
        assert "gave_up" not in [o.value for o in outcomes]
    smallest_loser = min((quantities[o.index] for o in outcomes if o.value == "conflict"), default=None)
    if smallest_loser is not None:
        assert inventory.available_stock < smallest_loser
    assert_invariants()


def test_multi_item_carts_in_every_order_never_deadlock(make_product, make_customer, caplog, inventory_strategy):
    products = [make_product(stock=40) for _ in range(4)]
    ids = [p.pk for p in products]
    buyers = [make_customer() for _ in range(48)]
    rng = random.Random(7)
    carts = []
    for _ in buyers:
        chosen = rng.sample(ids, rng.randint(2, 4))
        rng.shuffle(chosen)  # the same products, listed in different orders
        carts.append([(pid, rng.randint(1, 3)) for pid in chosen])

    def buy(i):
        try:
            return checkout_or_conflict(buyers[i], carts[i])
        except ServiceBusy:
            return "busy"

    outcomes = run_concurrently(48, buy)
    log = [r.getMessage() for r in caplog.records if r.name == "skincare.db"]

    assert [o.error for o in outcomes if o.error] == []  # no deadlock or database error escaped
    assert "busy" not in [o.value for o in outcomes]
    reserved = dict.fromkeys(ids, 0)
    for o in outcomes:
        if isinstance(o.value, Order):
            for pid, qty in carts[o.index]:
                reserved[pid] += qty
    for product in products:
        inventory = Inventory.objects.get(product=product)
        assert inventory.reserved_stock == reserved[product.pk]
        assert inventory.available_stock + inventory.reserved_stock == 40  # units conserved
    # Not even a deadlock that retry_transient would have retried quietly: the lock order prevents them.
    # (SERIALIZABLE's own mechanism is retrying serialization failures, 40001; a deadlock, 40P01, never.)
    if inventory_strategy == "serializable":
        assert [line for line in log if "40001" not in line] == []
    else:
        assert log == []
    assert_invariants()


def naive_checkout(product_id, qty, read_done):
    """The bug this project exists to prevent: read, decide in Python, write an absolute value.
    ``read_done`` (a barrier) makes every buyer read before any buyer writes: the race, made certain."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT available_stock FROM inventories WHERE product_id = %s", [product_id])
        available = cursor.fetchone()[0]
        read_done.wait(timeout=60)
        if available < qty:
            return "conflict"
        cursor.execute(
            "UPDATE stock_buckets SET available_stock = %s, reserved_stock = reserved_stock + %s WHERE bucket = 0 AND product_id = %s",
            [available - qty, qty, product_id],
        )
        return "created"


def test_control_naive_read_check_write_oversells(make_product):
    """The same race against a deliberately naive checkout: the assertions of the real test fail, so the
    harness can see an oversell when there is one."""
    product = make_product(stock=1)
    buyers = 20
    read_done = threading.Barrier(buyers)

    outcomes = run_concurrently(buyers, lambda i: naive_checkout(product.pk, 1, read_done))

    assert [o.error for o in outcomes if o.error] == []
    created = sum(1 for o in outcomes if o.value == "created")
    inventory = Inventory.objects.get(product=product)
    # Exactly-one-wins is broken: every buyer "got" the single unit.
    assert created == buyers
    assert inventory.reserved_stock == buyers
    assert inventory.available_stock == 0  # the counter hides the oversell; only reserved_stock shows it


def test_guarded_update_alone_decides_when_every_buyer_passed_the_early_stock_read(
    make_product, make_customer, monkeypatch
):
    """checkout refuses visibly sold-out products early with an unlocked read. That read is only a shortcut:
    here every buyer passes it (all see the last unit) before any of them reserves, so the guarded UPDATE is
    the only thing left between them and an oversell."""
    from inventory import reserve as inventory_reserve

    product = make_product(stock=1)
    buyers = [make_customer() for _ in range(20)]
    all_read = threading.Barrier(20)
    real_reserve = inventory_reserve.stock_reserve
    waited = threading.local()

    def reserve_after_everyone_read(**kwargs):
        if not getattr(waited, "once", False):  # a retried attempt (lock_busy, 40001) does not wait again
            waited.once = True
            all_read.wait(timeout=60)
        return real_reserve(**kwargs)

    monkeypatch.setattr(inventory_reserve, "stock_reserve", reserve_after_everyone_read)

    outcomes = run_concurrently(20, lambda i: checkout_or_conflict(buyers[i], [(product.pk, 1)]))

    assert [o.error for o in outcomes if o.error] == []
    assert sum(isinstance(o.value, Order) for o in outcomes) == 1
    assert sum(o.value == "conflict" for o in outcomes) == 19
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (0, 1)
    assert_invariants()


def lock_rows_in_cart_order(product_ids, both_hold_their_first_row):
    """TEST ONLY: lock stock rows in the order the cart lists them, the mistake the ascending-id lock
    order exists to prevent."""
    with transaction.atomic():
        for position, product_id in enumerate(product_ids):
            list(StockBucket.objects.select_for_update(no_key=True).filter(product_id=product_id, bucket=0))
            if position == 0:
                both_hold_their_first_row.wait(timeout=60)


def test_control_locking_in_cart_order_deadlocks(make_product):
    """Two carts with the same products listed in opposite orders, each holding its first row: PostgreSQL
    must kill one of them (40P01). ``stock_reserve`` locks in ascending product id, which is why the storm
    test above sees no deadlock at all."""
    from skincare.db import sqlstate

    a, b = make_product(stock=5), make_product(stock=5)
    carts = [[a.pk, b.pk], [b.pk, a.pk]]
    both_hold_their_first_row = threading.Barrier(2)

    outcomes = run_concurrently(2, lambda i: lock_rows_in_cart_order(carts[i], both_hold_their_first_row))

    assert [sqlstate(o.error) for o in outcomes if o.error] == ["40P01"]
