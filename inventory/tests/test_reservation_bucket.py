"""A reservation names the stock row (bucket) that holds its units (``orders.Reservation.bucket``).

The reserve statement (``inventory.reserve._RESERVE_TEMPLATE``) is the one writer of reserve ledger rows and names the
bucket it took on the reservation; release, cancel, expiry and payment take the units from the bucket the reservation
names, and a reservation whose bucket does not hold them is corrupt, never moved to bucket 0. The audit checks each
reservation's bucket against its reserve ledger row (``orders/tests/test_audit.py``).
"""

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from checkout import services as checkouts
from checkout.testing import place, place_order
from devtools.testing import assert_invariants
from inventory import reserve, services
from inventory.exceptions import InventoryCorrupted
from inventory.models import StockBucket, StockMovement
from orders import services as order_services
from orders.models import Order, Reservation
from payments import services as payment_services


def held_in(order, product):
    """(the reservation's bucket, the bucket of its reserve ledger rows)."""
    reservation = Reservation.objects.get(order_id=order.pk, product=product)
    ledger = list(
        StockMovement.objects.filter(order_id=order.pk, product=product, reason="reserve").values_list(
            "bucket", flat=True
        )
    )
    return reservation.bucket, ledger


@pytest.mark.django_db(transaction=True)
def test_every_reservation_names_the_bucket_its_one_reserve_ledger_row_names(make_product, make_customer):
    one_row = make_product(stock=10)
    bucketed = make_product(stock=40, buckets=8)
    orders = []
    for _ in range(6):
        orders.append(place_order(customer=make_customer(), items=[(one_row.pk, 1), (bucketed.pk, 1)]))
    big = place_order(customer=make_customer(), items=[(bucketed.pk, 7)])  # more than any bucket: the full pass

    for order in orders:
        assert held_in(order, one_row) == (0, [0])
        bucket, ledger = held_in(order, bucketed)
        assert ledger == [bucket] and 0 <= bucket < 8
    bucket, ledger = held_in(big, bucketed)
    assert ledger == [bucket]
    assert StockBucket.objects.get(product=bucketed, bucket=bucket).reserved_stock >= 7
    # the spread claims did not all land in bucket 0: the reservation names the claimed bucket, not the planned one
    assert {held_in(order, bucketed)[0] for order in orders} != {0}
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_full_pass_of_a_lowered_product_names_bucket_0(make_product, make_customer):
    """K lowered to 1 while every unit was reserved: the units come back to buckets 1..3 (where their reservations
    named them), and a checkout larger than bucket 0 gathers them there with the full pass."""
    product = make_product(stock=8, buckets=4)  # two units in each of buckets 0..3
    first = [place_order(customer=make_customer(), items=[(product.pk, 2)]) for _ in range(4)]
    assert sorted(held_in(order, product)[0] for order in first) == [0, 1, 2, 3]
    services.stock_buckets_set(product_id=product.pk, buckets=1)
    for order in first:
        order_services.order_cancel(order_id=order.pk)
    assert sorted(StockBucket.objects.filter(product=product).values_list("available_stock", flat=True)) == [2] * 4
    order = place_order(customer=make_customer(), items=[(product.pk, 8)])
    assert held_in(order, product) == (0, [0])
    order_services.order_cancel(order_id=order.pk)
    assert StockBucket.objects.get(product=product, bucket=0).available_stock == 8
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_cancel_expiry_and_payment_take_the_units_from_the_bucket_the_reservation_names(make_product, make_customer):
    product = make_product(stock=40, buckets=8)
    paid, cancelled, expired = (place_order(customer=make_customer(), items=[(product.pk, 2)]) for _ in range(3))
    buckets = {order.pk: held_in(order, product)[0] for order in (paid, cancelled, expired)}
    before = dict(StockBucket.objects.filter(product=product).values_list("bucket", "reserved_stock"))

    assert (
        payment_services.payment_event_apply(
            event_id=f"evt-bucket-{paid.pk}",
            event_type="payment.succeeded",
            order_id=paid.pk,
            amount=paid.total,
            currency=paid.currency,
        )
        == "paid"
    )
    order_services.order_cancel(order_id=cancelled.pk)
    Order.objects.filter(pk=expired.pk).update(payment_expires_at=Order.objects.get(pk=expired.pk).created_at)
    Reservation.objects.filter(order_id=expired.pk).update(expires_at=Order.objects.get(pk=expired.pk).created_at)
    assert order_services.orders_expire_due().orders == 1

    after = dict(StockBucket.objects.filter(product=product).values_list("bucket", "reserved_stock"))
    expected = dict(before)
    for bucket in buckets.values():
        expected[bucket] -= 2
    assert after == expected
    for reason, order in (("consume", paid), ("cancel", cancelled), ("expire", expired)):
        row = StockMovement.objects.get(order_id=order.pk, reason=reason)
        assert row.bucket == buckets[order.pk]
    assert_invariants()


@pytest.mark.django_db
def test_a_reservation_whose_bucket_does_not_hold_its_units_is_corrupt_not_taken_from_bucket_0(
    make_product, make_customer
):
    product = make_product(stock=8, buckets=2)
    other = place_order(customer=make_customer(), items=[(product.pk, 1)])
    order = place_order(customer=make_customer(), items=[(product.pk, 1)])
    Reservation.objects.filter(order_id=other.pk).update(bucket=0)
    Reservation.objects.filter(order_id=order.pk).update(bucket=1)
    # make sure bucket 1 holds nothing reserved and bucket 0 holds both units (what a fallback to 0 would take)
    StockBucket.objects.filter(product=product, bucket=1).update(reserved_stock=0)
    StockBucket.objects.filter(product=product, bucket=0).update(reserved_stock=2)
    before = list(
        StockBucket.objects.filter(product=product).values_list("bucket", "available_stock", "reserved_stock")
    )

    with pytest.raises(InventoryCorrupted):
        order_services.order_cancel(order_id=order.pk)

    assert Order.objects.get(pk=order.pk).status == Order.Status.PENDING_PAYMENT
    assert (
        list(StockBucket.objects.filter(product=product).values_list("bucket", "available_stock", "reserved_stock"))
        == before
    )


@pytest.mark.django_db
def test_units_without_a_bucket_are_corrupt(make_product, customer):
    product = make_product(stock=3)
    order = place_order(customer=customer, items=[(product.pk, 1)])
    with pytest.raises(InventoryCorrupted), transaction.atomic():
        reserve.stock_release(lines=[reserve.ReservedUnits(order.pk, product.pk, None, 1)], reason="cancel")
    assert StockBucket.objects.get(product=product, bucket=0).reserved_stock == 1


@pytest.mark.django_db
def test_a_reservation_cannot_name_a_bucket_its_product_has_no_stock_row_for(make_product, customer):
    product = make_product(stock=3, buckets=2)
    order = place_order(customer=customer, items=[(product.pk, 1)])
    with pytest.raises(IntegrityError, match="has no stock row 2"), transaction.atomic():
        Reservation.objects.filter(order_id=order.pk).update(bucket=2)
    Reservation.objects.filter(order_id=order.pk).update(bucket=1)  # a row it has: allowed
    assert Reservation.objects.get(order_id=order.pk).bucket == 1


@pytest.mark.django_db
def test_the_order_statement_writes_no_ledger_row_the_reserve_statement_writes_it(make_product, customer):
    product = make_product(stock=3)
    sent = []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        place(customer=customer, items=[(product.pk, 1)])
    assert "stock_movements" not in checkouts.ORDER_SQL
    writers = [sql for sql in sent if "INSERT INTO stock_movements" in sql]
    assert writers == [reserve.RESERVE_SQL]
    # still the last statement before COMMIT (here the RELEASE of the test's own savepoint)
    assert [sql for sql in sent if not sql.startswith("RELEASE SAVEPOINT")][-1] == reserve.RESERVE_SQL


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_bucket_from_the_reserve_ledger_and_refuses_a_reservation_without_one(
    make_product, make_customer
):
    one_row, bucketed = make_product(stock=5), make_product(stock=40, buckets=8)
    orders = [place_order(customer=make_customer(), items=[(one_row.pk, 1), (bucketed.pk, 1)]) for _ in range(4)]
    named = dict(Reservation.objects.values_list("pk", "bucket"))
    assert set(named.values()) != {0}

    executor = MigrationExecutor(connection)
    executor.migrate([("orders", "0002_orders_customer_pending_idx")])
    try:
        # a reservation with no reserve ledger row (the bucket cannot be known): the migration must stop
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO inventory_reservations (order_id, product_id, qty, status, expires_at, created_at, "
                "updated_at) SELECT %s, %s, 1, 'cancelled', now(), now(), now() RETURNING id",
                [orders[0].pk, make_product(stock=1).pk],
            )
            (orphan,) = cursor.fetchone()
        executor = MigrationExecutor(connection)
        with pytest.raises(IntegrityError):
            executor.migrate([("orders", "0003_reservation_bucket")])
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM inventory_reservations WHERE id = %s", [orphan])
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert dict(Reservation.objects.values_list("pk", "bucket")) == named
