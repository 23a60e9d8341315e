"""Two sweepers at once share the gateway's questions: each due order with a payment page is leased to the one that
asks about it (``payments.sessions.sessions_check_due``), the other neither asks about it nor cancels it
(``orders.services.orders_expire_due``'s ``skip``). Against the Midtrans fake over real sockets, on committed data;
the first sweeper runs on its own thread and connection and is held inside its questions by the fake until the
second has swept. The control runs the naive sweep (no lease, no skip) as the second sweeper."""

import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection

from devtools.testing import assert_invariants
from orders import services as order_services
from orders.models import Order
from payments import sessions
from payments.models import GatewayTransaction
from payments.tests.test_gateway_boundary import due_orders_with_pages, status_requests

COUNT = 4


def lease_blind_sweep() -> None:
    """Control: a sweep whose lease statement ignores other sweepers' leases (it asks about every due order)."""
    original = sessions.DUE_SESSIONS_LEASE_SQL
    blind = original.replace("AND (s.sweep_lease_until IS NULL OR s.sweep_lease_until <= now())", "")
    assert blind != original
    sessions.DUE_SESSIONS_LEASE_SQL = blind
    try:
        check = sessions.sessions_check_due(limit=200)
    finally:
        sessions.DUE_SESSIONS_LEASE_SQL = original
    order_services.orders_expire_due(due_by=check.due_by, skip=check.elsewhere)


def skip_blind_sweep() -> None:
    """Control: a sweep that leases but then cancels every due order, the ones another sweeper is asking about too."""
    check = sessions.sessions_check_due(limit=200)
    order_services.orders_expire_due(due_by=check.due_by)


def leasing_sweep() -> None:
    call_command("expire_reservations", stdout=StringIO())


SECOND_SWEEPERS = {
    "leased": leasing_sweep,
    "control-lease-blind": lease_blind_sweep,
    "control-skip-blind": skip_blind_sweep,
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("second", list(SECOND_SWEEPERS))
def test_two_sweepers_never_ask_about_or_cancel_the_same_order(api, fake, settings, make_product, customer, second):
    """Four due orders with a payment page, each paid on its page (the notifications lost). The first sweeper leases
    them and is held inside its four questions; a second sweeper sweeps meanwhile: it asks no question and cancels
    nothing, and the first then pays every order. Controls: a second sweeper blind to leases asks all four again; one
    blind to the skip list cancels all four, and the money the first sweeper then finds becomes refunds."""
    settings.MIDTRANS_TIMEOUT_SECONDS = 10
    settings.GATEWAY_SWEEP_SECONDS = 10
    settings.GATEWAY_MAX_CALLS = 2 * COUNT  # two sweepers are two processes, each with its own bulkhead
    orders = due_orders_with_pages(api, settings, make_product(stock=10, price="129000.00"), customer, COUNT)
    order_ids = [o.pk for o in orders]
    issued = list(GatewayTransaction.objects.filter(order__in=orders).values_list("gateway_order_id", flat=True))
    for gateway_order_id in issued:
        fake.pay(gateway_order_id=gateway_order_id, gross_amount="129000.00")
    held: list[str] = []
    all_held = threading.Event()
    hold = threading.Event()
    hold.set()
    release = threading.Event()

    def first_sweeper_held(endpoint: str) -> None:
        if endpoint == "status" and hold.is_set():
            held.append(endpoint)
            if len(held) == COUNT:
                all_held.set()
            release.wait(20)

    fake.chaos = first_sweeper_held

    def first_sweeper() -> None:
        try:
            call_command("expire_reservations", stdout=StringIO())
        finally:
            connection.close()

    first = threading.Thread(target=first_sweeper)
    first.start()
    try:
        assert all_held.wait(20), "the first sweeper did not ask about every due order"
        hold.clear()  # from now on the gateway answers at once
        SECOND_SWEEPERS[second]()
        second_asked = sum(1 for _method, path in fake.requests if path.endswith("/status")) - COUNT
        after_second = set(Order.objects.filter(pk__in=order_ids).values_list("status", flat=True))
    finally:
        release.set()
        first.join(30)
    assert not first.is_alive()
    statuses = set(Order.objects.filter(pk__in=order_ids).values_list("status", flat=True))

    if second == "leased":
        assert second_asked == 0  # every due order was the first sweeper's to ask about ...
        assert after_second == {"pending_payment"}  # ... and to settle
        assert statuses == {"paid"}  # the money taken before the deadline paid each order, once
        assert_invariants()
    elif second == "control-lease-blind":
        assert second_asked == COUNT
    else:
        assert second_asked == 0 and after_second == {"cancelled"} and statuses == {"cancelled"}


@pytest.mark.django_db(transaction=True)
def test_a_lease_the_sweeper_let_lapse_is_taken_over(api, fake, settings, make_product, customer):
    """A sweeper that died after leasing holds nothing for long: once its lease lapses the next sweeper asks and
    cancels as usual."""
    orders = due_orders_with_pages(api, settings, make_product(stock=10, price="129000.00"), customer, 2)
    check = sessions.sessions_check_due(limit=200, sweeper="died")
    assert check.elsewhere == [] and status_requests(fake) == 2  # it asked (no transaction there: closed) ...
    with connection.cursor() as cursor:  # ... and died before cancelling; its lease is live
        cursor.execute(
            "SELECT count(*) FROM payment_sessions WHERE sweep_lease_by = 'died' AND sweep_lease_until > now()"
        )
        assert cursor.fetchone()[0] == 2

    assert sessions.sessions_check_due(limit=200, sweeper="next").elsewhere == sorted(o.pk for o in orders)
    assert order_services.orders_expire_due(skip=sorted(o.pk for o in orders)).orders == 0

    with connection.cursor() as cursor:  # the lease lapses
        cursor.execute("UPDATE payment_sessions SET sweep_lease_until = now() - interval '1 second'")
    call_command("expire_reservations", stdout=StringIO())
    assert set(Order.objects.filter(pk__in=[o.pk for o in orders]).values_list("status", flat=True)) == {"cancelled"}
    assert status_requests(fake) == 2  # closed at the gateway already: nothing left to ask
    assert_invariants()


@pytest.mark.django_db
def test_a_sweep_in_small_batches_cancels_only_what_it_asked_about(api, fake, settings, make_product, customer):
    """Four due orders with a payment page, each paid on its page, the newest order with the oldest deadline; a
    batch of two. Each check leases and asks about the two oldest deadlines, and the batch after it claims only
    orders due by the last deadline asked about: every order is paid, none cancelled unasked (a batch claims by
    ascending id, so cancelling up to now would take the two unasked older orders)."""
    orders = due_orders_with_pages(api, settings, make_product(stock=10, price="129000.00"), customer, COUNT)
    with connection.cursor() as cursor:
        for age, order in enumerate(orders, start=1):
            cursor.execute(
                "UPDATE orders SET payment_expires_at = now() - make_interval(mins => %s) WHERE id = %s",
                [age, order.pk],
            )
    for gateway_order_id in GatewayTransaction.objects.filter(order__in=orders).values_list(
        "gateway_order_id", flat=True
    ):
        fake.pay(gateway_order_id=gateway_order_id, gross_amount="129000.00")

    call_command("expire_reservations", "--batch-size", "2", stdout=StringIO())

    assert [Order.objects.get(pk=order.pk).status for order in orders] == ["paid"] * COUNT
    assert status_requests(fake) == COUNT  # each asked about once
    assert_invariants()


def held_lease_key(held: threading.Event, release: threading.Event) -> None:
    """Another sweeper inside its lease statement: the sweepers' key held until ``release``."""
    from django.db import transaction

    from skincare.locks import advisory_xact_lock

    try:
        with transaction.atomic():
            advisory_xact_lock(space="sweeper_lease", idents=[1])
            held.set()
            release.wait(timeout=60)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lease", ["retried", "control-unguarded"])
def test_a_looping_sweeper_that_waits_too_long_for_the_lease_sweeps_again(
    api, fake, settings, make_product, customer, monkeypatch, lease
):
    """The lease key held past the lock timeout is a busy database, not a crash: a looping sweeper reports it and
    sweeps at its next interval, and that sweep cancels the due order. Control: the lease without the transaction
    runner, whose lock timeout is an error the loop does not know, ends the sweeper."""
    from backoffice.management.commands.expire_reservations import Command

    if lease == "control-unguarded":
        monkeypatch.setattr(sessions, "_due_sessions_lease", sessions._due_sessions_lease.__wrapped__)
    (order,) = due_orders_with_pages(api, settings, make_product(stock=5, price="129000.00"), customer, 1)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=held_lease_key, args=(held, release))
    holder.start()
    assert held.wait(timeout=30)
    sweeper = Command(stdout=StringIO(), stderr=StringIO())
    sweeper.sweeper = "looping"
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '200ms'")
    try:
        if lease == "control-unguarded":
            with pytest.raises(OperationalError, match="lock timeout"):  # not a busy database: the loop ends
                sweeper.run_once(batch_size=200, loop=True, interval=1, stop=threading.Event())
        else:
            sweeper.run_once(batch_size=200, loop=True, interval=1, stop=threading.Event())
            assert "(busy); next sweep in 1s" in sweeper.stderr._out.getvalue()
        assert Order.objects.get(pk=order.pk).status == "pending_payment"
    finally:
        release.set()
        holder.join(timeout=60)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    sweeper.run_once(batch_size=200, loop=True, interval=1, stop=threading.Event())  # the next interval
    assert Order.objects.get(pk=order.pk).status == "cancelled"
    assert_invariants()
