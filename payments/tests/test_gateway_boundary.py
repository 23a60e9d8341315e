"""The gateway boundary (``payments.boundary``): a whole-call deadline, a bulkhead and a circuit breaker, each with a
control that shows the naive call failing the same test, against the Midtrans fake over real sockets."""

import contextlib
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from checkout.testing import place_order
from devtools.testing import assert_invariants, make_overdue
from orders.models import Order
from payments import boundary, sessions
from payments.exceptions import GatewayUnavailable
from payments.models import GatewayTransaction, PaymentSession
from payments.tests.test_midtrans import open_session, pay_link


@pytest.fixture
def fake(fake, settings):
    """The payments tests' fake (conftest), with a breaker that opens after two failures in a row."""
    settings.GATEWAY_BREAKER_FAILURES = 2
    settings.GATEWAY_BREAKER_SECONDS = 30
    settings.GATEWAY_MAX_CALLS = 4
    return fake


def snap_requests(fake):
    return sum(1 for method, path in fake.requests if (method, path) == ("POST", "/snap/v1/transactions"))


def status_requests(fake):
    return sum(1 for _method, path in fake.requests if path.endswith("/status"))


# The whole-call deadline


def test_a_gateway_that_drips_its_answer_is_given_up_at_the_deadline(fake):
    """Each read is answered within the socket timeout, the whole answer takes 8 x 0.2 s: the call is given up at
    the deadline. Control: the same request without the boundary (a socket timeout per read) waits for all of it."""
    fake.pay(gateway_order_id="42-a", gross_amount="10.00")
    fake.drip("status", chunks=8, interval=0.2)
    gw = sessions.configured_gateway()

    with pytest.raises(GatewayUnavailable, match=r"within 0\.5 s"):
        gw.status_get(gateway_order_id="42-a")

    status, body = gw._request("GET", f"{fake.base_url}/v2/42-a/status", None)  # control: no whole-call deadline
    assert status == 200 and body["order_id"] == "42-a"


# The circuit breaker


def test_after_repeated_failures_the_gateway_is_not_asked_and_then_tried_again(fake):
    fake.stall("status")
    gw = sessions.configured_gateway()
    for _ in range(2):
        with pytest.raises(GatewayUnavailable):
            gw.status_get(gateway_order_id="42-a")
    asked = status_requests(fake)

    with pytest.raises(GatewayUnavailable, match="2 times in a row") as refused:
        gw.status_get(gateway_order_id="42-a")

    assert status_requests(fake) == asked  # answered at once: nothing sent
    assert 1 <= refused.value.retry_after <= 30
    # The period passes (the boundary's clock moved on) with the gateway still dead: the one trial call is sent, fails,
    # and the breaker stops asking for another period.
    guard = boundary.boundary()
    now = guard.clock()
    guard.clock = lambda: now + 31
    with pytest.raises(GatewayUnavailable):
        gw.status_get(gateway_order_id="42-a")
    assert status_requests(fake) == asked + 1
    with pytest.raises(GatewayUnavailable, match="3 times in a row; not asking it for 30 s") as refused:
        gw.status_get(gateway_order_id="42-a")
    assert status_requests(fake) == asked + 1  # answered at once: nothing sent
    assert refused.value.retry_after == 30
    # Another period; the gateway answers again: one trial call closes it.
    fake.stalled.clear()
    fake.pay(gateway_order_id="42-a", gross_amount="10.00")
    guard.clock = lambda: now + 62
    assert gw.status_get(gateway_order_id="42-a") is not None
    assert gw.status_get(gateway_order_id="42-a") is not None
    assert status_requests(fake) == asked + 3


def test_control_without_the_breaker_every_call_waits_for_the_dead_gateway(fake, settings):
    settings.GATEWAY_BREAKER_FAILURES = 1000
    fake.stall("status")
    gw = sessions.configured_gateway()
    for _ in range(3):
        with pytest.raises(GatewayUnavailable):
            gw.status_get(gateway_order_id="42-a")
    assert status_requests(fake) == 3


@pytest.mark.django_db
def test_an_open_breaker_answers_the_payment_page_at_once_and_the_reservation_holds(api, fake, make_product, customer):
    order = place_order(customer=customer, items=[(make_product(stock=5, price="129000.00").pk, 1)])
    link = pay_link(api, order)
    fake.stall("snap")
    assert [Client().get(link).status_code for _ in range(2)] == [503, 503]
    assert snap_requests(fake) == 2  # both reached the stalled Snap; the Core API answered in between

    answer = Client().get(link)

    assert answer.status_code == 503 and answer.json()["code"] == "gateway_unavailable"
    assert 1 <= int(answer["Retry-After"]) <= 30 and "not asking it" in answer.json()["error"]
    assert snap_requests(fake) == 2  # answered at once: Snap was not asked
    order.refresh_from_db()
    assert order.status == Order.Status.PENDING_PAYMENT and not PaymentSession.objects.exists()
    assert_invariants()
    # Nothing left to ask about: the two sent attempts were found absent by the next visit, and the refused one
    # never reached the gateway.
    issued = GatewayTransaction.objects.filter(order=order)
    assert issued.count() == 3 and not issued.filter(closed_at=None).exists()


def due_orders_with_pages(api, settings, product, customer, count):
    """``count`` orders of one customer, each with its payment page open, all past their deadline."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0
    orders = [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(count)]
    for order in orders:
        open_session(api, order)
        make_overdue(order)
    return orders


def answers_500(endpoint):
    return "500" if endpoint == "status" else None


@pytest.mark.django_db
@pytest.mark.parametrize("breaker_failures", [2, 1000], ids=["protected", "control-no-breaker"])
def test_a_dead_gateway_costs_one_sweep_a_few_questions_and_every_unit_comes_back(
    api, fake, settings, make_product, customer, breaker_failures
):
    """Six due orders with a payment page, the Core API answering 500, one question at a time: the sweeper asks
    until the breaker opens (2 questions), then expires the rest unasked; every order expires and is marked for
    reconcile_payments. Control: without the breaker every one of the six is asked."""
    settings.GATEWAY_MAX_CALLS = 1
    settings.GATEWAY_BREAKER_FAILURES = breaker_failures
    orders = due_orders_with_pages(api, settings, make_product(stock=10, price="129000.00"), customer, 6)
    fake.chaos = answers_500

    call_command("expire_reservations", stdout=StringIO())

    assert status_requests(fake) == (2 if breaker_failures == 2 else 6)
    assert set(Order.objects.filter(pk__in=[o.pk for o in orders]).values_list("status", flat=True)) == {"cancelled"}
    assert PaymentSession.objects.filter(needs_reconciliation=True).count() == 6
    fake.chaos = None  # Midtrans answers again: reconcile_payments asks about every order it expired unconfirmed
    boundary.forget()  # reconcile_payments runs in a process of its own: its breaker starts closed
    report = StringIO()
    call_command("reconcile_payments", stdout=report)
    assert "unreachable" not in report.getvalue()
    # Midtrans answered for every order and nothing is to mend: none is left to reconcile (the sale board's count).
    assert PaymentSession.objects.filter(needs_reconciliation=True).count() == 0
    assert_invariants()


# The bulkhead


@pytest.mark.parametrize("max_calls", [2, 3])
def test_calls_past_the_bulkhead_are_refused_at_once(fake, settings, max_calls):
    """Two calls wait on a stalled gateway; with a bulkhead of 2 a third is refused without being sent. Control:
    with room for 3 it is sent and waits like the others."""
    settings.GATEWAY_MAX_CALLS = max_calls
    settings.GATEWAY_BREAKER_FAILURES = 1000
    settings.MIDTRANS_TIMEOUT_SECONDS = 10  # the waiting calls outlast the test's third call
    fake.stall("status")
    arrived = threading.Semaphore(0)
    fake.on_request = lambda method, path: arrived.release()
    gw = sessions.configured_gateway()
    errors: list[BaseException] = []

    def wait_on_the_gateway() -> None:
        try:
            gw.status_get(gateway_order_id="42-a")
        except GatewayUnavailable as exc:
            errors.append(exc)

    waiting = [threading.Thread(target=wait_on_the_gateway) for _ in range(2)]
    for thread in waiting:
        thread.start()
    assert arrived.acquire(timeout=10) and arrived.acquire(timeout=10)  # both are at the gateway

    third = threading.Thread(target=wait_on_the_gateway)
    third.start()
    if max_calls == 2:
        third.join(timeout=10)
        assert not third.is_alive() and "already waiting" in str(errors[0])
        assert status_requests(fake) == 2
    else:
        assert arrived.acquire(timeout=10)  # the control: the third call reached the stalled gateway too
        assert status_requests(fake) == 3
    fake.release.set()  # the gateway answers nothing and closes: every waiting call ends
    for thread in [*waiting, third]:
        thread.join(timeout=15)
        assert not thread.is_alive()


# The sweep's questions: at once, and within a bound


@pytest.mark.django_db
@pytest.mark.parametrize("max_calls", [4, 1])
def test_the_sweeper_asks_its_questions_at_once(api, fake, settings, make_product, customer, max_calls):
    """Four due orders paid there, notifications lost: the fake answers a status question only once four are waiting
    together (a barrier), so only a sweep that asks them at once recovers the money. Control: one question at a
    time, each answered 500 when the barrier breaks, and every order expires unconfirmed."""
    settings.GATEWAY_MAX_CALLS = max_calls
    settings.GATEWAY_BREAKER_FAILURES = 1000
    orders = due_orders_with_pages(api, settings, make_product(stock=10, price="129000.00"), customer, 4)
    for order in orders:
        fake.pay(order.pk, gross_amount=order.total)
    together = threading.Barrier(4, timeout=0.3)

    def wait_for_the_others(endpoint):
        if endpoint != "status":
            return None
        try:
            together.wait()
        except threading.BrokenBarrierError:
            return "500"
        return None

    fake.chaos = wait_for_the_others

    call_command("expire_reservations", stdout=StringIO())

    statuses = set(Order.objects.filter(pk__in=[o.pk for o in orders]).values_list("status", flat=True))
    assert statuses == ({"paid"} if max_calls == 4 else {"cancelled"})
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_sweep_waits_for_the_gateway_no_longer_than_its_bound(api, fake, settings, make_product, customer):
    """Every question would wait 30 s for a stalled gateway; the sweep gives them up at GATEWAY_SWEEP_SECONDS (1 s),
    expires the orders unconfirmed and marks them, and ends long before any question's own deadline."""
    settings.MIDTRANS_TIMEOUT_SECONDS = 30
    settings.GATEWAY_SWEEP_SECONDS = 1
    orders = due_orders_with_pages(api, settings, make_product(stock=10, price="129000.00"), customer, 3)
    fake.stall("status")
    swept = threading.Thread(target=lambda: call_command("expire_reservations", stdout=StringIO()))

    swept.start()
    swept.join(timeout=15)

    assert not swept.is_alive()  # a sweep bounded by its own 30 s questions would still be waiting
    fake.release.set()
    assert set(Order.objects.filter(pk__in=[o.pk for o in orders]).values_list("status", flat=True)) == {"cancelled"}
    assert PaymentSession.objects.filter(needs_reconciliation=True).count() == 3
    assert_invariants()


# One boundary per process, shared by the threads of a web worker


def boundaries_made_at_once(monkeypatch) -> set[int]:
    """Four threads of one process ask for its boundary at the same moment; a boundary being made waits until a
    second one is being made at once (it never is when they are made one at a time): the boundaries they got."""
    boundary.forget()
    made_at_once = threading.Barrier(2, timeout=3)
    real = boundary.Boundary

    class MeetingBoundary(real):
        def __init__(self, **kwargs):
            with contextlib.suppress(threading.BrokenBarrierError):
                made_at_once.wait()
            super().__init__(**kwargs)

    monkeypatch.setattr(boundary, "Boundary", MeetingBoundary)
    start = threading.Barrier(4)
    got = []

    def ask():
        start.wait(timeout=30)
        got.append(boundary.boundary())

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    boundary.forget()
    return {id(made) for made in got}  # all of them alive here: one id each


def test_the_threads_of_a_process_share_one_boundary(monkeypatch):
    assert len(boundaries_made_at_once(monkeypatch)) == 1  # one bulkhead, one breaker per endpoint


def test_control_boundaries_made_unguarded_are_two(monkeypatch):
    monkeypatch.setattr(boundary, "_making", contextlib.nullcontext())
    assert len(boundaries_made_at_once(monkeypatch)) >= 2  # each counts its own calls: the bulkhead is doubled
