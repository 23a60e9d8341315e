"""The stock ledger: every service writes exactly the rows it should, in the same transaction as the change,
and the database itself refuses to rewrite or delete ledger rows."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.db.models.functions import Now

from checkout.testing import place_order
from devtools.testing import assert_invariants
from inventory import catalogue, services
from inventory.exceptions import StaleStockVersion, StockConflict, StockWouldGoNegative
from inventory.models import Inventory, StockMovement
from orders import services as order_services
from orders.models import Order, Reservation
from payments import services as payment_services
from skincare.db import sqlstate

pytestmark = pytest.mark.django_db

R = StockMovement.Reason


@pytest.fixture
def ops_user(db):
    return get_user_model().objects.create(username="ledger-ops", is_staff=True)


def last_id():
    return StockMovement.objects.order_by("-id").values_list("id", flat=True).first() or 0


def rows_since(marker):
    """The ledger rows written after ``marker``, oldest first, as comparable tuples."""
    return list(
        StockMovement.objects.filter(id__gt=marker)
        .order_by("id")
        .values_list("reason", "product_id", "available_delta", "reserved_delta", "order_id", "actor_id", "note")
    )


def counters(product):
    inv = Inventory.objects.get(product=product)
    return inv.available_stock, inv.reserved_stock, inv.version


def test_product_create_writes_one_restock_row_for_initial_stock(ops_user):
    marker = last_id()
    product = catalogue.product_create(sku="LEDGER-1", name="Serum", price="10.00", initial_stock=7, actor=ops_user)
    empty = catalogue.product_create(sku="LEDGER-2", name="Toner", price="10.00", initial_stock=0)

    assert rows_since(marker) == [(R.RESTOCK, product.pk, 7, 0, None, ops_user.pk, "initial stock")]
    assert counters(product)[:2] == (7, 0)
    assert counters(empty)[:2] == (0, 0)  # no stock, no ledger row (the ledger forbids zero rows)
    assert_invariants()


def test_checkout_writes_one_reserve_row_per_product(make_product, customer):
    first, second = make_product(stock=10), make_product(stock=10)
    marker = last_id()

    # Listed out of order and one product twice: merged, and the rows come in ascending product id.
    order = place_order(customer=customer, items=[(second.pk, 1), (first.pk, 2), (second.pk, 2)])

    assert rows_since(marker) == [
        (R.RESERVE, first.pk, -2, 2, order.pk, None, ""),
        (R.RESERVE, second.pk, -3, 3, order.pk, None, ""),
    ]
    assert counters(first)[:2] == (8, 2)
    assert counters(second)[:2] == (7, 3)
    assert_invariants()


def test_refused_checkout_writes_no_ledger_row(make_product, customer):
    plenty, short = make_product(stock=10), make_product(stock=1)
    marker = last_id()

    with pytest.raises(StockConflict):
        place_order(customer=customer, items=[(plenty.pk, 1), (short.pk, 2)])

    assert rows_since(marker) == []
    assert counters(plenty)[:2] == (10, 0)
    assert counters(short)[:2] == (1, 0)
    assert_invariants()


def test_payment_writes_one_consume_row_per_line(make_product, customer):
    first, second = make_product(stock=10), make_product(stock=10)
    order = place_order(customer=customer, items=[(first.pk, 2), (second.pk, 1)])
    marker = last_id()

    outcome = payment_services.payment_event_apply(
        event_id="evt-ledger-paid",
        event_type=payment_services.EVENT_SUCCEEDED,
        order_id=order.pk,
        amount=order.total,
        currency=order.currency,
    )

    assert outcome == "paid"
    assert rows_since(marker) == [
        (R.CONSUME, first.pk, 0, -2, order.pk, None, ""),
        (R.CONSUME, second.pk, 0, -1, order.pk, None, ""),
    ]
    assert counters(first)[:2] == (8, 0)
    assert counters(second)[:2] == (9, 0)
    assert_invariants()


def test_cancel_writes_one_cancel_row_per_line(make_product, customer):
    product = make_product(stock=10)
    order = place_order(customer=customer, items=[(product.pk, 4)])
    marker = last_id()

    order_services.order_cancel(order_id=order.pk, reason=Order.CancelReason.OPS_CANCELLED)

    assert rows_since(marker) == [(R.CANCEL, product.pk, 4, -4, order.pk, None, "")]
    assert counters(product)[:2] == (10, 0)
    assert_invariants()


def test_expiry_writes_one_expire_row_per_line(make_product, make_customer):
    product, other = make_product(stock=10), make_product(stock=10)
    due = place_order(customer=make_customer(), items=[(product.pk, 3), (other.pk, 1)])
    not_due = place_order(customer=make_customer(), items=[(product.pk, 2)])
    past = Now() - timedelta(seconds=1)
    Order.objects.filter(pk=due.pk).update(payment_expires_at=past)
    Reservation.objects.filter(order=due).update(expires_at=past)
    marker = last_id()

    batch = order_services.orders_expire_due()

    assert (batch.orders, batch.reservations, batch.units) == (1, 2, 4)
    assert rows_since(marker) == [
        (R.EXPIRE, product.pk, 3, -3, due.pk, None, ""),
        (R.EXPIRE, other.pk, 1, -1, due.pk, None, ""),
    ]
    assert counters(product)[:2] == (8, 2)  # the order that is not due keeps its 2 units
    assert Order.objects.get(pk=not_due.pk).status == Order.Status.PENDING_PAYMENT
    assert_invariants()


@pytest.mark.parametrize(
    ("reason", "delta"), [(R.ADJUSTMENT, 5), (R.ADJUSTMENT, -4), (R.RESTOCK, 20)], ids=["plus", "minus", "restock"]
)
def test_adjust_writes_one_row_with_actor_and_note(make_product, ops_user, reason, delta):
    product = make_product(stock=10)
    version = counters(product)[2]
    marker = last_id()

    services.stock_adjust(
        product_id=product.pk, delta=delta, note="  found in back room  ", actor=ops_user, reason=reason
    )

    assert rows_since(marker) == [(reason, product.pk, delta, 0, None, ops_user.pk, "found in back room")]
    assert counters(product) == (10 + delta, 0, version + 1)
    assert_invariants()


def test_adjust_below_zero_is_refused_and_writes_nothing(make_product, customer, ops_user):
    product = make_product(stock=5)
    place_order(customer=customer, items=[(product.pk, 2)])  # 3 available, 2 reserved
    before = counters(product)
    marker = last_id()

    with pytest.raises(StockWouldGoNegative):
        services.stock_adjust(product_id=product.pk, delta=-4, note="damaged", actor=ops_user)

    assert rows_since(marker) == []
    assert counters(product) == before  # not even the version moved
    # Exactly down to zero is allowed: the guard is "not below zero", not "not to zero".
    services.stock_adjust(product_id=product.pk, delta=-3, note="damaged", actor=ops_user)
    assert counters(product)[:2] == (0, 2)
    assert_invariants()


@pytest.mark.parametrize("bad", [{"delta": 0, "note": "x"}, {"delta": 3, "note": "   "}], ids=["zero", "no-note"])
def test_adjust_without_delta_or_reason_is_refused(make_product, bad):
    product = make_product(stock=5)
    before, marker = counters(product), last_id()

    with pytest.raises(ValueError, match="needs a"):
        services.stock_adjust(product_id=product.pk, **bad)

    assert rows_since(marker) == []
    assert counters(product) == before


def test_set_counted_writes_one_count_row_with_the_difference(make_product, customer, ops_user):
    product = make_product(stock=10)
    place_order(customer=customer, items=[(product.pk, 2)])  # 8 available, 2 reserved
    available, reserved, version = counters(product)
    marker = last_id()

    services.stock_set_counted(
        product_id=product.pk, counted=5, expected_version=version, note="shelf count", actor=ops_user
    )

    assert rows_since(marker) == [(R.COUNT, product.pk, 5 - available, 0, None, ops_user.pk, "shelf count")]
    assert counters(product) == (5, reserved, version + 1)  # the reservation is untouched
    assert_invariants()


def test_set_counted_to_the_same_figure_writes_nothing(make_product, ops_user):
    product = make_product(stock=10)
    before, marker = counters(product), last_id()

    services.stock_set_counted(
        product_id=product.pk, counted=10, expected_version=before[2], note="count", actor=ops_user
    )

    assert rows_since(marker) == []
    assert counters(product) == before


def test_set_counted_with_a_stale_version_is_refused_and_writes_nothing(make_product, customer, ops_user):
    product = make_product(stock=10)
    loaded_version = counters(product)[2]
    place_order(customer=customer, items=[(product.pk, 1)])  # the row moves on
    before, marker = counters(product), last_id()

    with pytest.raises(StaleStockVersion):
        services.stock_set_counted(
            product_id=product.pk, counted=15, expected_version=loaded_version, note="count", actor=ops_user
        )

    assert rows_since(marker) == []
    assert counters(product) == before
    assert_invariants()


# -- the ledger is append-only in the database ------------------------------------------------------------


@pytest.fixture
def movement(make_product):
    product = make_product(stock=3)
    return StockMovement.objects.get(product=product)


def assert_rejected_by_trigger(excinfo):
    assert sqlstate(excinfo.value) == "42501"  # insufficient_privilege, raised by the trigger
    assert "stock_movements is append-only" in str(excinfo.value)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE stock_movements SET available_delta = 300 WHERE id = %s",
        "UPDATE stock_movements SET note = 'rewritten' WHERE id = %s",
        "DELETE FROM stock_movements WHERE id = %s",
    ],
    ids=["update-delta", "update-note", "delete"],
)
def test_raw_update_and_delete_are_rejected_by_the_database(movement, sql):
    with pytest.raises(DatabaseError) as excinfo, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [movement.pk])

    assert_rejected_by_trigger(excinfo)
    movement_now = StockMovement.objects.get(pk=movement.pk)
    assert (movement_now.available_delta, movement_now.reserved_delta, movement_now.note) == (3, 0, "initial stock")


def test_orm_update_and_delete_are_rejected_by_the_database(movement):
    with pytest.raises(DatabaseError) as updated, transaction.atomic():
        StockMovement.objects.filter(pk=movement.pk).update(available_delta=1000)
    assert_rejected_by_trigger(updated)

    with pytest.raises(DatabaseError) as deleted, transaction.atomic():
        StockMovement.objects.filter(pk=movement.pk).delete()
    assert_rejected_by_trigger(deleted)

    assert StockMovement.objects.filter(pk=movement.pk, available_delta=3).exists()
    assert_invariants()
