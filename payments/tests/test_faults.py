"""Database faults inside one process, each provoked deterministically on real PostgreSQL (events, barriers and
a second connection; no mocks): a connection killed between a checkout's statements, a deadlock and a
serialization failure that are retried, lock timeouts that answer 503, and an ops stock adjustment racing a
checkout. Every test ends with the audit clean and nothing half-written; each protection has a control."""

import logging
import threading

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from checkout import services as checkouts
from checkout.testing import place_order
from devtools.testing import ThreadRun, assert_invariants, backends, wait_for_lock_waiters, wait_until
from inventory import reserve as inventory_reserve
from inventory import services as inventory_services
from inventory.models import Inventory, StockBucket, StockMovement
from orders.audit import audit_inventory
from orders.models import Order, Reservation
from payments.models import PaymentAttempt
from skincare.db import retry_transient, sqlstate
from skincare.errors import DatabaseUnavailable

pytestmark = pytest.mark.django_db(transaction=True)


def counts():
    return (
        Order.objects.count(),
        Reservation.objects.count(),
        PaymentAttempt.objects.count(),
        StockMovement.objects.exclude(reason="restock").count(),
    )


def stock(product):
    return Inventory.objects.values_list("available_stock", "reserved_stock").get(product=product)


def client_for(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    return client


def set_lock_timeout(ms):
    """This thread's connection waits at most ``ms`` for a lock (what DB_LOCK_TIMEOUT_MS sets for every
    connection; short here so that the test is quick)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = {int(ms)}")


def backend_pid():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def terminate(pid):
    """From this (second) connection: kill ``pid``'s connection and wait until its backend is gone."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert cursor.fetchone()[0] is True
    wait_until(lambda: pid not in backends("true"), what=f"backend {pid} to exit")


class PauseAfter:
    """Test-only wrapper: run the real function, then record the connection's backend pid, say so (``paused``)
    and wait for ``resume``. Only the first call pauses."""

    def __init__(self, real):
        self.real = real
        self.paused, self.resume = threading.Event(), threading.Event()
        self.pid = None

    def __call__(self, *args, **kwargs):
        result = self.real(*args, **kwargs)
        if not self.paused.is_set():
            self.pid = backend_pid()
            self.paused.set()
            assert self.resume.wait(timeout=60)
        return result


# --------------------------------------------------------------------------------------------------------------
# A checkout's connection is killed between its statements


@pytest.mark.parametrize("through", ["service", "api"])
def test_checkout_connection_killed_after_its_first_statements_is_a_clean_503(
    make_product, customer, monkeypatch, through
):
    product = make_product(stock=5)
    before = counts()
    pause = PauseAfter(checkouts.write_order)  # order, lines, reservations, attempt written, not committed
    steps = tuple(pause if step is checkouts.write_order else step for step in checkouts.OPEN_ORDER)
    monkeypatch.setattr(checkouts, "OPEN_ORDER", steps)

    def buy():
        if through == "api":
            return client_for(customer).post(
                "/v1/checkout", {"items": [{"product_id": product.pk, "qty": 2}]}, format="json"
            )
        return place_order(customer=customer, items=[(product.pk, 2)])

    run = ThreadRun(buy)
    assert pause.paused.wait(timeout=60)
    terminate(pause.pid)
    pause.resume.set()
    outcome = run.join()

    if through == "api":
        assert outcome.error is None, outcome.error
        response = outcome.value
        assert response.status_code == 503
        assert response.json()["code"] == "database_unavailable"
        assert response["Retry-After"] == "2"
    else:
        assert isinstance(outcome.error, DatabaseUnavailable), repr(outcome.error)
    assert counts() == before  # no order, line, reservation, attempt or ledger row
    assert stock(product) == (5, 0)
    assert_invariants()
    # The next checkout gets a fresh connection and goes through.
    monkeypatch.undo()
    again = ThreadRun(lambda: place_order(customer=customer, items=[(product.pk, 2)]).pk).join()
    assert again.error is None, again.error
    assert stock(product) == (3, 2)
    assert_invariants()


def test_control_checkout_steps_in_separate_transactions_leave_a_half_written_order(make_product, customer):
    """The same kill against the checkout's steps without the one transaction around them: the order and its
    reservation rows stay behind with no stock held for them, and the audit says so."""
    product = make_product(stock=5)
    paused, resume = threading.Event(), threading.Event()
    pids = []

    def naive_checkout():
        state = checkouts.Checkout(customer=customer, quantities={product.pk: 2}, cart_id=None, memory_asked=False)
        with transaction.atomic():  # the order's rows commit on their own
            checkouts.order_open(state)
        pids.append(backend_pid())
        paused.set()
        resume.wait(timeout=60)
        with transaction.atomic():
            checkouts.order_stock_reserve(state)

    run = ThreadRun(naive_checkout)
    assert paused.wait(timeout=60)
    terminate(pids[0])
    resume.set()
    outcome = run.join()

    assert outcome.error is not None and sqlstate(outcome.error) in (None, "57P01")
    assert Order.objects.count() == 1  # half-written
    assert {v.check for v in audit_inventory()} >= {"reserved_vs_active_reservations"}


# --------------------------------------------------------------------------------------------------------------
# Deadlock and serialization failure: the whole transaction runs again


def test_a_deadlocked_checkout_is_retried_and_succeeds(make_product, customer, caplog):
    """Another transaction holds product b and then asks for product a, while the checkout holds a and waits for
    b: PostgreSQL kills the checkout (it waited first, so its deadlock check runs first). retry_transient runs
    the whole checkout again once the other transaction is gone."""
    a, b = make_product(stock=5), make_product(stock=5)
    caplog.set_level(logging.INFO, logger="skincare.db")

    with transaction.atomic():
        list(StockBucket.objects.select_for_update(no_key=True).filter(product=b, bucket=0))
        run = ThreadRun(lambda: place_order(customer=customer, items=[(a.pk, 1), (b.pk, 1)]))
        wait_for_lock_waiters(1)  # the checkout holds a and waits for b
        list(
            StockBucket.objects.select_for_update(no_key=True).filter(product=a, bucket=0)
        )  # the cycle; the checkout dies
    outcome = run.join()

    assert outcome.error is None, repr(outcome.error)
    assert isinstance(outcome.value, Order)
    assert any("retrying after 40P01" in r.getMessage() for r in caplog.records if r.name == "skincare.db")
    assert stock(a) == stock(b) == (4, 1)
    assert Order.objects.count() == 1  # the killed attempt left nothing
    assert_invariants()


def test_a_deadlocked_cancel_is_retried_and_succeeds(make_product, customer, caplog):
    """Another transaction holds product b's stock row and then asks for product a's, while the cancel holds a's
    and waits for b's: PostgreSQL kills the cancel (it waited first). retry_transient runs the whole cancel again
    once the other transaction is gone: the customer gets their cancel, not an error."""
    a, b = make_product(stock=5), make_product(stock=5)
    order = place_order(customer=customer, items=[(a.pk, 1), (b.pk, 1)])
    caplog.set_level(logging.INFO, logger="skincare.db")

    with transaction.atomic():
        list(StockBucket.objects.select_for_update(no_key=True).filter(product=b))
        run = ThreadRun(lambda: client_for(customer).post(f"/v1/orders/{order.pk}/cancel"))
        wait_for_lock_waiters(1)  # the cancel holds a and waits for b
        list(StockBucket.objects.select_for_update(no_key=True).filter(product=a))  # the cycle; the cancel dies
    outcome = run.join()

    assert outcome.error is None, repr(outcome.error)
    assert outcome.value.status_code == 200, outcome.value.content
    assert any("retrying after 40P01" in r.getMessage() for r in caplog.records if r.name == "skincare.db")
    assert Order.objects.get(pk=order.pk).status == "cancelled"
    assert stock(a) == stock(b) == (5, 0)
    assert_invariants()


@retry_transient
@transaction.atomic
def bump_version_at_repeatable_read(*, product_id, attempts, read_done, other_committed):
    """TEST ONLY: a service that reads a snapshot, lets another transaction change the row, then updates it."""
    attempts.append(1)
    with connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("SELECT version FROM inventories WHERE product_id = %s", [product_id])
        if len(attempts) == 1:
            read_done.set()
            assert other_committed.wait(timeout=60)
        cursor.execute(
            "UPDATE stock_buckets SET version = version + 1, available_stock = available_stock + 1 WHERE bucket = 0 AND product_id = %s",
            [product_id],
        )
        cursor.execute(
            "INSERT INTO stock_movements (product_id, available_delta, reserved_delta, reason, note, "
            "created_at) VALUES (%s, 1, 0, 'adjustment', 'serialization test', now())",
            [product_id],
        )
    return len(attempts)


def test_a_serialization_failure_is_retried_from_the_start(make_product, caplog):
    product = make_product(stock=5)
    version = Inventory.objects.get(product=product).version
    read_done, other_committed, attempts = threading.Event(), threading.Event(), []
    caplog.set_level(logging.INFO, logger="skincare.db")

    run = ThreadRun(
        lambda: bump_version_at_repeatable_read(
            product_id=product.pk, attempts=attempts, read_done=read_done, other_committed=other_committed
        )
    )
    assert read_done.wait(timeout=60)
    StockBucket.objects.filter(product=product, bucket=0).update(version=version + 10)  # commits (autocommit)
    other_committed.set()
    outcome = run.join()

    assert outcome.error is None, repr(outcome.error)
    assert outcome.value == 2  # the first attempt hit 40001, the second went through
    assert any("retrying after 40001" in r.getMessage() for r in caplog.records if r.name == "skincare.db")
    assert Inventory.objects.get(product=product).version == version + 11
    assert StockMovement.objects.filter(note="serialization test").count() == 1  # the failed attempt left nothing
    assert stock(product) == (6, 0)
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# Lock timeouts: 503 busy with Retry-After, nothing written


def test_lock_timeout_on_checkout_is_503_busy_and_writes_nothing(make_product, customer):
    product = make_product(stock=5)
    before = counts()

    def buy():
        set_lock_timeout(200)
        return client_for(customer).post(
            "/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json"
        )

    with transaction.atomic():
        list(
            StockBucket.objects.select_for_update(no_key=True).filter(product=product, bucket=0)
        )  # someone holds the row
        outcome = ThreadRun(buy).join()

    assert outcome.error is None, repr(outcome.error)
    assert outcome.value.status_code == 503, outcome.value.content
    assert outcome.value.json()["code"] == "busy"
    assert outcome.value["Retry-After"] == "1"
    assert counts() == before
    assert stock(product) == (5, 0)
    assert_invariants()


def test_lock_timeout_on_cancel_is_503_busy_and_writes_nothing(make_product, customer):
    product = make_product(stock=5)
    order = place_order(customer=customer, items=[(product.pk, 2)])
    before = counts()

    def cancel():
        set_lock_timeout(200)
        return client_for(customer).post(f"/v1/orders/{order.pk}/cancel")

    with transaction.atomic():
        list(Order.objects.select_for_update(no_key=True).filter(pk=order.pk))  # a payment holds the order
        outcome = ThreadRun(cancel).join()

    assert outcome.error is None, repr(outcome.error)
    assert outcome.value.status_code == 503, outcome.value.content
    assert outcome.value.json()["code"] == "busy"
    assert outcome.value["Retry-After"] == "1"
    assert counts() == before
    assert Order.objects.get(pk=order.pk).status == "pending_payment"
    assert stock(product) == (3, 2)
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# An ops adjustment racing a checkout


def naive_stock_adjust(*, product_id, delta, note):
    """TEST ONLY: the adjustment as a read, then a write of the absolute figure (what a plain admin form save
    does), with its ledger row."""
    with transaction.atomic():
        available = Inventory.objects.get(product_id=product_id).available_stock
        StockMovement.objects.create(
            product_id=product_id, available_delta=delta, reserved_delta=0, reason="adjustment", note=note
        )
        StockBucket.objects.filter(product_id=product_id, bucket=0).update(available_stock=available + delta)


@pytest.mark.parametrize("adjust", ["service", "control"])
def test_stock_adjust_racing_a_checkout_keeps_the_reservation(make_product, customer, monkeypatch, adjust):
    """The checkout has reserved (its UPDATE holds the row) but not committed when ops add 5 units. The
    F-expression adjustment waits for the row and adds to the newest figure: both changes survive. The control
    (read, then write the absolute figure) overwrites the checkout's reservation."""
    product = make_product(stock=10)
    pause = PauseAfter(inventory_reserve.stock_reserve)
    monkeypatch.setattr(inventory_reserve, "stock_reserve", pause)

    checkout = ThreadRun(lambda: place_order(customer=customer, items=[(product.pk, 3)]))
    assert pause.paused.wait(timeout=60)
    func = inventory_services.stock_adjust if adjust == "service" else naive_stock_adjust
    restock = ThreadRun(lambda: func(product_id=product.pk, delta=5, note="delivery"))
    wait_for_lock_waiters(1)  # the adjustment waits for the checkout's row lock
    pause.resume.set()
    assert checkout.join().error is None
    assert restock.join().error is None

    if adjust == "service":
        assert stock(product) == (10 - 3 + 5, 3)
        assert_invariants()
    else:
        assert stock(product) == (10 + 5, 3)  # three units sold twice
        assert {v.check for v in audit_inventory()} >= {"counters_vs_ledger"}


def test_stock_adjust_storm_with_checkouts_conserves_every_unit(make_product, make_customer):
    from devtools.testing import run_concurrently

    product = make_product(stock=40)
    buyers = [make_customer() for _ in range(16)]

    def act(i):
        if i % 4 == 0:
            return inventory_services.stock_adjust(product_id=product.pk, delta=3, note=f"restock {i}")
        return place_order(customer=buyers[i], items=[(product.pk, 2)])

    outcomes = run_concurrently(16, act)

    assert [o.error for o in outcomes if o.error] == []
    available, reserved = stock(product)
    assert reserved == 2 * 12
    assert available == 40 + 3 * 4 - 2 * 12
    assert_invariants()
