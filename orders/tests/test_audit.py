"""``manage.py audit_inventory``: silent on healthy data, and each check catches the corruption it exists for.

Each corruption below is built to trip exactly one check, so a check that stopped working cannot hide behind
another one. The ledger trigger forbids UPDATE/DELETE on stock_movements, so corruptions go through the
inventories, reservations and orders rows, or add ledger rows.
"""

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from checkout.testing import place_order
from inventory import services as inventory_services
from inventory.models import Inventory, StockBucket, StockMovement
from orders import services as order_services
from orders.audit import CHECKS, DESCRIPTIONS, audit_inventory
from orders.models import Order, Reservation
from payments import services as payment_services

pytestmark = pytest.mark.django_db


def run_audit():
    out = io.StringIO()
    call_command("audit_inventory", stdout=out)
    return out.getvalue()


def pay(order):
    return payment_services.payment_event_apply(
        event_id=f"evt-audit-{order.pk}",
        event_type=payment_services.EVENT_SUCCEEDED,
        order_id=order.pk,
        amount=order.total,
        currency=order.currency,
    )


def expire_now(order):
    past = Now() - timedelta(seconds=1)
    Order.objects.filter(pk=order.pk).update(payment_expires_at=past)
    Reservation.objects.filter(order=order).update(expires_at=past)


@pytest.fixture
def busy_shop(make_product, make_customer):
    """Every kind of history: pending, paid, cancelled, expired orders, an adjustment and a count."""
    serum, toner = make_product(stock=20), make_product(stock=10)
    pending = place_order(customer=make_customer(), items=[(serum.pk, 2), (toner.pk, 1)])
    paid = place_order(customer=make_customer(), items=[(serum.pk, 3)])
    assert pay(paid) == "paid"
    cancelled = place_order(customer=make_customer(), items=[(toner.pk, 2)])
    order_services.order_cancel(order_id=cancelled.pk, reason=Order.CancelReason.OPS_CANCELLED)
    expired = place_order(customer=make_customer(), items=[(serum.pk, 1), (toner.pk, 4)])
    expire_now(expired)
    assert order_services.orders_expire_due().orders == 1
    inventory_services.stock_adjust(product_id=serum.pk, delta=-1, note="damaged")
    toner_version = Inventory.objects.get(product=toner).version
    inventory_services.stock_set_counted(product_id=toner.pk, counted=7, expected_version=toner_version, note="count")
    # The serum is spread over 4 stock buckets mid-history (its pending units stay in bucket 0), then sold from one.
    inventory_services.stock_buckets_set(product_id=serum.pk, buckets=4)
    bucketed = place_order(customer=make_customer(), items=[(serum.pk, 1)])
    statuses = dict(Order.objects.values_list("pk", "status"))
    assert [statuses[o.pk] for o in (pending, paid, cancelled, expired)] == [
        "pending_payment",
        "paid",
        "cancelled",
        "cancelled",
    ]
    return {"serum": serum, "toner": toner, "pending": pending, "paid": paid, "bucketed": bucketed}


def test_audit_passes_on_healthy_data(busy_shop):
    output = run_audit()

    for name in CHECKS:
        assert f"ok   {DESCRIPTIONS[name]}" in output
    assert "FAIL" not in output
    assert output.strip().endswith("audit_inventory: all checks passed")
    serum, toner = (Inventory.objects.get(product=busy_shop[name]) for name in ("serum", "toner"))
    assert (serum.available_stock, serum.reserved_stock) == (13, 3)  # 20 - 3 pending - 3 paid - 1 damaged
    assert (toner.available_stock, toner.reserved_stock) == (7, 1)  # counted 7, 1 pending
    assert audit_inventory() == []


# -- one corruption per check ---------------------------------------------------------------------------------


def corrupt_negative_stock(shop):
    """A negative counter (the CHECK constraint normally makes this impossible: imagine a restore without it).
    The constraint is dropped and re-added NOT VALID inside the test's transaction, which is rolled back."""
    toner = shop["toner"]
    available = Inventory.objects.get(product=toner).available_stock
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE refuses to run with deferred FK checks pending
        cursor.execute("ALTER TABLE stock_buckets DROP CONSTRAINT stock_buckets_available_stock_gte_0")
        cursor.execute("UPDATE stock_buckets SET available_stock = -1 WHERE bucket = 0 AND product_id = %s", [toner.pk])
        cursor.execute(
            "ALTER TABLE stock_buckets ADD CONSTRAINT stock_buckets_available_stock_gte_0 "
            "CHECK (available_stock >= 0) NOT VALID"
        )
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    # Keep the ledger in step, so that only the negative-stock check fires.
    StockMovement.objects.create(
        product=toner, available_delta=-1 - available, reserved_delta=0, reason="adjustment", note="corrupt"
    )
    return toner.pk


def corrupt_reserved_vs_active_reservations(shop):
    """A reservation's quantity edited by hand: reserved_stock no longer matches the active reservations."""
    reservation = Reservation.objects.get(order=shop["pending"], product=shop["serum"])
    Reservation.objects.filter(pk=reservation.pk).update(qty=F("qty") - 1)
    return shop["serum"].pk


def corrupt_counters_vs_ledger(shop):
    """The bug this whole admin avoids: a counter written as a plain field, without a ledger row."""
    StockBucket.objects.filter(product=shop["serum"], bucket=0).update(available_stock=F("available_stock") + 5)
    return shop["serum"].pk


def corrupt_consumed_vs_ledger(shop):
    """A paid order's consumed reservation claims more units than the ledger consumed."""
    Reservation.objects.filter(order=shop["paid"]).update(qty=F("qty") + 1)
    return shop["serum"].pk


def corrupt_order_vs_reservations(shop):
    """An order marked paid behind the services' back: its reservations are still active."""
    Order.objects.filter(pk=shop["pending"].pk).update(status=Order.Status.PAID)
    return shop["pending"].pk


def corrupt_reservation_expiry_vs_order(shop):
    """One active reservation would outlive its order's payment window."""
    reservation = Reservation.objects.get(order=shop["pending"], product=shop["toner"])
    Reservation.objects.filter(pk=reservation.pk).update(expires_at=F("expires_at") + timedelta(hours=1))
    return reservation.pk


def corrupt_bucket_counters_vs_ledger(shop):
    """A unit moved from one bucket to another without ledger rows: the product's totals still agree."""
    serum = shop["serum"]
    StockBucket.objects.filter(product=serum, bucket=1).update(available_stock=F("available_stock") - 1)
    StockBucket.objects.filter(product=serum, bucket=2).update(available_stock=F("available_stock") + 1)
    return serum.pk


def corrupt_bucket_reserved_vs_reservations(shop):
    """Reserved units moved to another bucket, with ledger rows, while the reservation still names the old one."""
    serum = shop["serum"]
    held = StockMovement.objects.get(order_id=shop["bucketed"].pk, reason="reserve").bucket
    other = (held + 1) % 4
    for bucket, delta in ((held, -1), (other, 1)):
        StockBucket.objects.filter(product=serum, bucket=bucket).update(reserved_stock=F("reserved_stock") + delta)
        StockMovement.objects.create(
            product=serum, bucket=bucket, available_delta=0, reserved_delta=delta, reason="rebalance", note="corrupt"
        )
    return serum.pk


def corrupt_reservation_bucket_vs_ledger(shop):
    """Reserved units moved to another bucket, with ledger rows, and the reservation renamed after them: the
    counters and the reservations agree, but the reservation no longer names the bucket its reserve row took."""
    serum = shop["serum"]
    reservation = Reservation.objects.get(order=shop["bucketed"], product=serum)
    other = (reservation.bucket + 1) % 4
    for bucket, delta in ((reservation.bucket, -1), (other, 1)):
        StockBucket.objects.filter(product=serum, bucket=bucket).update(reserved_stock=F("reserved_stock") + delta)
        StockMovement.objects.create(
            product=serum, bucket=bucket, available_delta=0, reserved_delta=delta, reason="rebalance", note="corrupt"
        )
    Reservation.objects.filter(pk=reservation.pk).update(bucket=other)
    return reservation.pk


CORRUPTIONS = {
    "negative_stock": corrupt_negative_stock,
    "reserved_vs_active_reservations": corrupt_reserved_vs_active_reservations,
    "counters_vs_ledger": corrupt_counters_vs_ledger,
    "bucket_counters_vs_ledger": corrupt_bucket_counters_vs_ledger,
    "bucket_reserved_vs_reservations": corrupt_bucket_reserved_vs_reservations,
    "reservation_bucket_vs_ledger": corrupt_reservation_bucket_vs_ledger,
    "consumed_vs_ledger": corrupt_consumed_vs_ledger,
    "order_vs_reservations": corrupt_order_vs_reservations,
    "reservation_expiry_vs_order": corrupt_reservation_expiry_vs_order,
}


# The bucket check that a product-level corruption trips as well (the product has one bucket there).
BUCKET_TWIN = {
    "counters_vs_ledger": "bucket_counters_vs_ledger",
    "reserved_vs_active_reservations": "bucket_reserved_vs_reservations",
}


def test_every_check_has_a_corruption_test():
    assert set(CORRUPTIONS) == set(CHECKS)


@pytest.mark.parametrize("check", list(CORRUPTIONS))
def test_audit_catches_each_kind_of_violation(busy_shop, check):
    assert audit_inventory() == []
    subject_id = CORRUPTIONS[check](busy_shop)

    violations = audit_inventory()
    # A product's totals are the sum of its buckets, so a product-level corruption is one of a bucket too.
    twins = {check, BUCKET_TWIN.get(check, check)}
    assert {(v.check, v.subject_id) for v in violations} == {(name, subject_id) for name in twins}
    found = len(violations)
    violations = [v for v in violations if v.check == check]

    out = io.StringIO()
    with pytest.raises(CommandError, match=rf"audit_inventory: {found} violation\(s\)"):
        call_command("audit_inventory", stdout=out)
    report = out.getvalue().splitlines()
    assert f"FAIL {DESCRIPTIONS[check]} ({len(violations)} violations)" in report
    assert f"       [{check}] #{subject_id}: {violations[0].detail}" in report
    for other in set(CHECKS) - twins:
        assert f"ok   {DESCRIPTIONS[other]}" in report
    assert "all checks passed" not in out.getvalue()


def test_order_without_any_reservation_is_reported(busy_shop, customer):
    """The other shape of order_vs_reservations: an order row with no reservations at all."""
    orphan = Order.objects.create(customer=customer, total=0, payment_expires_at=Now())

    assert [(v.check, v.subject_id) for v in audit_inventory()] == [("order_vs_reservations", orphan.pk)]
    with pytest.raises(CommandError):
        run_audit()


def test_the_negative_stock_corruption_leaves_the_constraint_in_place(busy_shop, make_product):
    """The corruption's DDL is rolled back with its transaction (here a savepoint): the constraint stays validated."""
    with pytest.raises(RuntimeError), transaction.atomic():
        corrupt_negative_stock(busy_shop)
        raise RuntimeError("roll the corruption back")
    with connection.cursor() as cursor:
        cursor.execute("SELECT convalidated FROM pg_constraint WHERE conname = 'stock_buckets_available_stock_gte_0'")
        assert cursor.fetchall() == [(True,)]
    product = make_product(stock=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        StockBucket.objects.filter(product=product, bucket=0).update(available_stock=-1)
