"""K raised after the quote read: the units are in the new stock rows, not gone.

A checkout reads each product's K and stock rows with its quote (no lock), and ops may spread a product's units over
more buckets while the sale runs (``stock_buckets_set``). A checkout that read K = 1 and then finds bucket 0 short
must look again before it refuses: a refusal there is a false sold-out (the storm test that changes K finds it by
chance; these find it every time). Each test commits the K change from another connection right after the checkout's
quote read, then moves bucket 0's units away, so bucket 0 is short while the product still has every unit. The
controls take the second look out (``inventory.reserve.has_other_stock_rows`` answering no) and get the false sold-out.
"""

import pytest
from django.db import connection, transaction

from checkout.services import QUOTES_SQL
from checkout.testing import place_order
from devtools.testing import ThreadRun, act_while_held, assert_invariants
from inventory import buckets, reserve, services
from inventory.exceptions import StockConflict
from inventory.models import StockBucket


def spread_and_empty_bucket_0(product_id: int) -> None:
    """On a connection of its own: K 1 → 4, then bucket 0's units moved to bucket 1; committed."""

    def change() -> None:
        services.stock_buckets_set(product_id=product_id, buckets=4)
        with transaction.atomic():
            available = buckets.lock_all_buckets(product_id=product_id)
            buckets.move_between_buckets(
                product_id=product_id,
                moves={0: -available[0], 1: available[0]},
                reason="rebalance",
                actor=None,
                note="test: bucket 0 emptied",
            )

    outcome = ThreadRun(change, name="ops").join()
    assert outcome.error is None, outcome.error


def after_the_quote_read(product_ids: list[int]):
    """An execute wrapper: once the checkout's quote read has run (its K and stock rows read), change K."""
    done = []

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql == QUOTES_SQL and not done:
            done.append(True)
            for product_id in product_ids:
                spread_and_empty_bucket_0(product_id)
        return result

    return wrapper


def units(product) -> tuple[int, int]:
    rows = StockBucket.objects.filter(product=product).values_list("available_stock", "reserved_stock")
    return sum(a for a, _ in rows), sum(r for _, r in rows)


@pytest.mark.django_db(transaction=True)
def test_one_product_whose_k_was_raised_after_the_quote_is_sold(make_product, customer):
    product = make_product(stock=8)
    with connection.execute_wrapper(after_the_quote_read([product.pk])):
        order = place_order(customer=customer, items=[(product.pk, 1)])
    assert order.pk
    assert units(product) == (7, 1)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_several_products_one_of_which_had_k_raised_after_the_quote_are_sold(make_product, customer):
    raised, plain = make_product(stock=8), make_product(stock=8)
    with connection.execute_wrapper(after_the_quote_read([raised.pk])):
        order = place_order(customer=customer, items=[(raised.pk, 1), (plain.pk, 1)])
    assert order.pk
    assert units(raised) == (7, 1) and units(plain) == (7, 1)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("several", [False, True], ids=["one product", "several products"])
def test_control_without_the_second_look_it_is_a_false_sold_out(make_product, customer, monkeypatch, several):
    monkeypatch.setattr(reserve, "has_other_stock_rows", lambda product_id: False)
    raised, plain = make_product(stock=8), make_product(stock=8)
    items = [(raised.pk, 1), (plain.pk, 1)] if several else [(raised.pk, 1)]
    with connection.execute_wrapper(after_the_quote_read([raised.pk])), pytest.raises(StockConflict):
        place_order(customer=customer, items=items)
    assert units(raised) == (8, 0)  # every unit still there: the refusal was false


def buy_five_while_k_goes_from_4_to_8(product, customer):
    """8 units in 4 buckets (2 each). A new bucket count of 8 moves one unit of each into 4 new rows and holds every
    row; a checkout of 5 (more than any bucket) reads its quote, goes to the full pass and waits for bucket 0; then
    the new count commits. The full pass must count the units in the rows that appeared while it waited."""
    return act_while_held(
        change=lambda: services.stock_buckets_set(product_id=product.pk, buckets=8),
        act=lambda: place_order(customer=customer, items=[(product.pk, 5)]),
    )


@pytest.mark.django_db(transaction=True)
def test_the_full_pass_counts_rows_added_while_it_waited(make_product, customer):
    product = make_product(stock=8, buckets=4)
    outcome = buy_five_while_k_goes_from_4_to_8(product, customer)
    assert outcome.error is None, outcome.error
    assert outcome.value.pk
    assert units(product) == (3, 5)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_a_full_pass_that_locks_once_misses_the_units_in_the_new_rows(make_product, customer, monkeypatch):
    def lock_once(*, product_id):
        with connection.cursor() as cursor:
            cursor.execute(buckets.LOCK_ALL_BUCKETS_SQL, {"product_id": product_id})
            return dict(cursor.fetchall())

    monkeypatch.setattr(reserve, "lock_all_buckets", lock_once)
    product = make_product(stock=8, buckets=4)
    outcome = buy_five_while_k_goes_from_4_to_8(product, customer)
    assert isinstance(outcome.error, StockConflict)  # a false sold-out: all 8 units are still there
    assert units(product) == (8, 0)
