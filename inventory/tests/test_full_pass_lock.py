"""The full pass of a bucketed product locks every stock row of the product before it reads them
(``LOCK_ALL_BUCKETS_SQL`` in ``inventory.buckets``, docs/strategies.md#stock-buckets).

Deterministic, unlike the storm test that changes K: one transaction holds an uncommitted change of bucket 0 (an
ops adjustment that took one damaged unit), and a checkout asks for more units than any bucket has, so it goes
straight to the full pass. The full pass must wait for the row, then read what the other transaction committed and
move units by those figures. Reading the rows without the lock, it plans its moves on figures that are no longer
true, and its own reservation finds the target bucket short (``InventoryCorrupted``, a 500) every time.
"""

import pytest

from checkout.testing import place_order
from devtools.testing import act_while_held, assert_invariants
from inventory import buckets, services
from inventory.exceptions import InventoryCorrupted
from inventory.models import StockBucket, StockMovement


def stock(product):
    """(available, reserved) by bucket."""
    rows = StockBucket.objects.filter(product=product).values_list("bucket", "available_stock", "reserved_stock")
    return {bucket: (available, reserved) for bucket, available, reserved in rows}


def buy_five_while_bucket_0_changes(product, customer):
    """Bucket 0 and 1 hold 3 units each; an ops adjustment takes one damaged unit from bucket 0 and holds its row; a
    checkout of 5 (more than any bucket) starts, and once it waits for a lock, the adjustment commits. Returns the
    outcome."""
    assert stock(product) == {0: (3, 0), 1: (3, 0)}
    return act_while_held(
        change=lambda: services.stock_adjust(product_id=product.pk, delta=-1, note="one unit damaged"),
        act=lambda: place_order(customer=customer, items=[(product.pk, 5)]),
    )


@pytest.mark.django_db(transaction=True)
def test_the_full_pass_waits_for_a_held_stock_row_and_counts_what_it_holds(make_product, customer):
    product = make_product(stock=6, buckets=2)

    outcome = buy_five_while_bucket_0_changes(product, customer)

    assert outcome.error is None, outcome.error  # 5 of the 5 units left: the checkout buys them all
    # It read the committed figures (2 and 3): bucket 1 held the most, so 2 units moved there from bucket 0.
    assert stock(product) == {0: (0, 0), 1: (0, 5)}
    moved = StockMovement.objects.filter(product=product, reason="rebalance", note="units for a checkout")
    assert sorted(moved.values_list("bucket", "available_delta")) == [(0, -2), (1, 2)]
    assert StockMovement.objects.get(order_id=outcome.value.pk, reason="reserve").bucket == 1
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_a_full_pass_that_reads_without_the_lock_plans_on_stale_figures(make_product, customer, monkeypatch):
    unlocked = buckets.LOCK_ALL_BUCKETS_SQL.replace("FOR NO KEY UPDATE", "")
    assert unlocked != buckets.LOCK_ALL_BUCKETS_SQL
    monkeypatch.setattr(buckets, "LOCK_ALL_BUCKETS_SQL", unlocked)
    product = make_product(stock=6, buckets=2)

    outcome = buy_five_while_bucket_0_changes(product, customer)

    # It read 3 and 3 (the adjustment not committed), moved 2 units into bucket 0 (waiting only for that row's
    # update), which then held 2 + 2 = 4 < 5: the checkout fails although the product had its 5 units.
    assert isinstance(outcome.error, InventoryCorrupted), outcome.error
    assert stock(product) == {0: (2, 0), 1: (3, 0)}  # rolled back: only the adjustment stays
    assert_invariants()
