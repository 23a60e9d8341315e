"""The sweeper loop's probe (backoffice/sweeper_probes.py): what it exports for the alert rules, read from a real
database in a real state: overdue reservations, a backend waiting for a row lock, an open transaction, and the
audit's result (clean, then after a ledger row written behind the services' back)."""

import threading

import pytest
from django.db import connection, transaction

from backoffice import probemetrics
from backoffice.sweeper_probes import Probe
from checkout.testing import place_order
from devtools.testing import ThreadRun, make_overdue, wait_for_lock_waiters

pytestmark = pytest.mark.django_db(transaction=True)


def gauge(metric, **labels):
    return (metric.labels(**labels) if labels else metric)._value.get()


def test_overdue_reservations_and_the_database_up(make_product, customer):
    product = make_product(stock=3)
    probe = Probe(interval=7, audit_every=0)
    probe.run()
    assert gauge(probemetrics.RESERVATIONS_OVERDUE) == 0
    assert gauge(probemetrics.RESERVATIONS_OVERDUE_SECONDS) == 0
    assert gauge(probemetrics.SWEEPER_INTERVAL) == 7
    assert gauge(probemetrics.DATABASE_UP) == 1
    make_overdue(place_order(customer=customer, items=[(product.pk, 2)]))
    probe.run()
    assert gauge(probemetrics.RESERVATIONS_OVERDUE) == 1
    assert gauge(probemetrics.RESERVATIONS_OVERDUE_SECONDS) >= 1


def test_a_lock_waiter_and_a_long_transaction_are_seen(make_product):
    product = make_product(stock=1)
    locked, release = threading.Event(), threading.Event()

    def holder():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM stock_buckets WHERE product_id = %s FOR UPDATE", [product.pk])
            locked.set()
            assert release.wait(30)

    def waiter():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM stock_buckets WHERE product_id = %s FOR UPDATE", [product.pk])

    holding = ThreadRun(holder, name="holder")
    assert locked.wait(30)
    waiting = ThreadRun(waiter, name="waiter")
    try:
        wait_for_lock_waiters(1)
        Probe(interval=1, audit_every=0).run()
        assert gauge(probemetrics.DB_LOCK_WAITERS) >= 1
        assert gauge(probemetrics.DB_OLDEST_TRANSACTION) > 0
    finally:
        release.set()
        assert holding.join().error is None
        assert waiting.join().error is None
    Probe(interval=1, audit_every=0).run()
    assert gauge(probemetrics.DB_LOCK_WAITERS) == 0


def test_the_audit_result_is_exported_every_audit_every(make_product):
    product = make_product(stock=2)
    probe = Probe(interval=1, audit_every=3600)
    probe.run()
    assert gauge(probemetrics.AUDIT_VIOLATIONS, check="counters_vs_ledger") == 0
    first_run = gauge(probemetrics.AUDIT_LAST_RUN)
    assert first_run > 0
    with connection.cursor() as cursor:  # a ledger row no counter agrees with
        cursor.execute(
            "INSERT INTO stock_movements (product_id, bucket, available_delta, reserved_delta, reason, note, created_at)"
            " VALUES (%s, 0, 5, 0, 'restock', 'tampered', now())",
            [product.pk],
        )
    probe.run()  # within --audit-every of the last audit: not run again
    assert gauge(probemetrics.AUDIT_LAST_RUN) == first_run
    assert gauge(probemetrics.AUDIT_VIOLATIONS, check="counters_vs_ledger") == 0
    Probe(interval=1, audit_every=1).run()  # a fresh loop audits at once
    assert gauge(probemetrics.AUDIT_VIOLATIONS, check="counters_vs_ledger") == 1
    assert gauge(probemetrics.AUDIT_VIOLATIONS, check="negative_stock") == 0


def test_a_probe_that_times_out_does_not_stop_the_sweeper(make_product):
    """A probe that cannot have its answer in time (a migration holds the reservations table; lock_timeout) is
    logged: no exception reaches the sweeper loop, the database is not reported down, the gauges keep their
    values."""
    make_product(stock=1)
    Probe(interval=1, audit_every=1).run()
    assert gauge(probemetrics.DATABASE_UP) == 1
    last_audit = gauge(probemetrics.AUDIT_LAST_RUN)
    locked, release = threading.Event(), threading.Event()

    def migration():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("LOCK TABLE inventory_reservations IN ACCESS EXCLUSIVE MODE")
            locked.set()
            assert release.wait(30)

    holder = ThreadRun(migration, name="migration")
    assert locked.wait(30)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '100ms'")
        Probe(interval=1, audit_every=1).run()
    finally:
        release.set()
        assert holder.join().error is None
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert gauge(probemetrics.DATABASE_UP) == 1
    assert gauge(probemetrics.AUDIT_LAST_RUN) == last_audit


def test_a_negative_audit_every_is_refused():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--audit-every must not be negative"):
        call_command("expire_reservations", "--loop", "--audit-every", "-1")
