"""The sweeper under faults: an order someone holds is skipped without waiting, a lock timeout is a clean
"busy" with nothing written, and a sweeper SIGKILLed in the middle of a batch leaves the batch undone, for the
next run to finish exactly once."""

import io
import os
import signal
import subprocess

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from devtools.testing import ThreadRun, assert_invariants, backends, wait_for_lock_waiters, wait_until
from inventory.models import Inventory, StockBucket, StockMovement
from orders import services as order_services
from orders.models import Order, Reservation
from orders.tests.test_sweeper import due_orders, manage, report, subprocess_env
from skincare.errors import ServiceBusy

pytestmark = pytest.mark.django_db(transaction=True)


def set_lock_timeout(ms):
    with connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = {int(ms)}")


def sweep_with_lock_timeout(ms):
    set_lock_timeout(ms)
    return order_services.orders_expire_due(batch_size=50)


def test_sweeper_skips_an_order_someone_holds_without_waiting(make_product, customer, settings):
    product = make_product(stock=10)
    first, held, last = due_orders(settings, customer, [[(product.pk, 1)]] * 3)

    with transaction.atomic():
        list(Order.objects.select_for_update(no_key=True).filter(pk=held.pk))  # a payment is deciding this one
        # A sweeper that waited for the row would run into the (1 s) lock timeout while the row is held.
        outcome = ThreadRun(lambda: sweep_with_lock_timeout(1000)).join()

    assert outcome.error is None, repr(outcome.error)
    assert (outcome.value.orders, outcome.value.units) == (2, 2)
    assert dict(Order.objects.values_list("pk", "status")) == {
        first.pk: "cancelled",
        held.pk: "pending_payment",
        last.pk: "cancelled",
    }
    assert order_services.orders_expire_due().orders == 1  # released: the next batch takes it
    assert Inventory.objects.get(product=product).available_stock == 10
    assert_invariants()


def test_sweeper_lock_timeout_is_busy_and_writes_nothing(make_product, customer, settings):
    product = make_product(stock=10)
    due = due_orders(settings, customer, [[(product.pk, 2)]] * 2)

    with transaction.atomic():
        list(StockBucket.objects.select_for_update(no_key=True).filter(product=product, bucket=0))  # ops hold the row
        outcome = ThreadRun(lambda: sweep_with_lock_timeout(200)).join()

    assert isinstance(outcome.error, ServiceBusy), repr(outcome.error)
    assert set(Order.objects.filter(pk__in=[o.pk for o in due]).values_list("status", flat=True)) == {"pending_payment"}
    assert set(Reservation.objects.values_list("status", flat=True)) == {"active"}
    assert not StockMovement.objects.filter(reason="expire").exists()
    assert_invariants()


def test_sweeper_command_reports_busy_with_exit_code_1(make_product, customer, settings):
    product = make_product(stock=10)
    due_orders(settings, customer, [[(product.pk, 1)]])

    def run_command():
        set_lock_timeout(200)
        call_command("expire_reservations", stdout=io.StringIO())

    with transaction.atomic():
        list(StockBucket.objects.select_for_update(no_key=True).filter(product=product, bucket=0))
        outcome = ThreadRun(run_command).join()

    assert isinstance(outcome.error, CommandError), repr(outcome.error)
    assert "(busy)" in str(outcome.error)
    assert Order.objects.get().status == "pending_payment"
    assert_invariants()


def test_sweeper_sigkilled_mid_batch_leaves_it_undone_and_the_next_run_finishes_exactly_once(
    make_product, customer, settings
):
    products = [make_product(stock=20), make_product(stock=20)]
    carts = [[(products[0].pk, 1), (products[1].pk, 2)], [(products[1].pk, 1)], [(products[0].pk, 3)]] * 3
    due = due_orders(settings, customer, carts)
    reservations = sum(len(cart) for cart in carts)

    env = {**subprocess_env(), "DB_LOCK_TIMEOUT_MS": "60000"}
    with transaction.atomic():
        # Hold the last stock row the batch needs: the sweeper claims the orders, expires the reservations,
        # writes its ledger rows and then waits here, in the middle of its one transaction.
        list(StockBucket.objects.select_for_update(no_key=True).filter(product=products[1], bucket=0))
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and manage.py
            manage("--batch-size", "100"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            (sweeper_backend,) = wait_for_lock_waiters(1, timeout=60)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    # Released: the orphaned backend finishes its statement, finds its client gone and rolls back.
    wait_until(lambda: sweeper_backend not in backends("true"), what="the killed sweeper's backend to exit")

    due_ids = [o.pk for o in due]
    assert set(Order.objects.filter(pk__in=due_ids).values_list("status", flat=True)) == {"pending_payment"}
    assert Reservation.objects.filter(status="active").count() == reservations
    assert not StockMovement.objects.filter(reason="expire").exists()
    assert_invariants()

    rerun = subprocess.run(  # noqa: S603
        manage(), env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False
    )

    assert rerun.returncode == 0, rerun.stderr
    assert report(rerun.stdout)[0]["orders"] == len(due)
    assert set(Order.objects.filter(pk__in=due_ids).values_list("status", flat=True)) == {"cancelled"}
    assert StockMovement.objects.filter(reason="expire").count() == reservations  # each reservation once
    for product in products:
        assert Inventory.objects.values_list("available_stock", "reserved_stock").get(product=product) == (20, 0)
    assert_invariants()
