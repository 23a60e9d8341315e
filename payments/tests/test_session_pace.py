"""Payment pages paced across every web process (``PAYMENT_SESSIONS_PER_SECOND``,
``payments.sessions.session_turn_take``): one page per turn, the turns booked on one row in the database so every
process counts the same ones; a visit whose turn has not come books one of its own, is answered
``503 payment_pages_paced`` with the seconds to it and asks the gateway nothing, and its visit at that turn creates
the page without booking again; a gateway's 429 moves every turn on by its wait; a queue's pace above the page rate
is refused at start-up and wherever a pace is set; reconciliation asks the gateway at the same pace."""

import itertools
import re
import threading
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from prometheus_client import REGISTRY

from checkout.testing import place_order
from devtools.testing import run_concurrently
from payments import checks, sessions
from payments.exceptions import PaymentPagesPaced
from payments.models import GatewayTransaction, PaymentSession, SessionPace, SessionTurn
from payments.tests.test_gateway_seam import reconcile
from skincare.errors import InvalidInput
from waitingroom import services as queue_services
from waitingroom.admin import ProductQueueForm
from waitingroom.models import ProductQueue

VISITORS = 12


def page(api, order, **headers):
    link = api.get(f"/v1/orders/{order.pk}").json()["payment_url"].removeprefix("http://testserver")
    return Client().get(link, **headers)


BROWSER = {"HTTP_ACCEPT": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def pages_counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("skincare_payment_pages_total", {"outcome": outcome}) or 0.0


def creates(fake) -> int:
    return sum(1 for method, path in fake.requests if (method, path) == ("POST", "/v2/invoices"))


def naive_turn_take(gateway: str, spacing: float, read: threading.Barrier):
    """The pace as two statements (read the row, then move it on): every visitor reads the turn as due before any
    of them moves it, so they all take it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT next_at <= clock_timestamp() FROM payment_session_pace WHERE gateway = %s", [gateway])
        (due,) = cursor.fetchone()
        read.wait(timeout=30)
        if not due:
            raise PaymentPagesPaced(order_id=0, turn_in_ms=int(spacing * 1000), retry_after_seconds=spacing)
        cursor.execute(
            "UPDATE payment_session_pace SET next_at = clock_timestamp() + make_interval(secs => %s) "
            "WHERE gateway = %s RETURNING next_at",
            [spacing, gateway],
        )
        return cursor.fetchone()[0]


# The pace without booking: the turn taken only when it is due, every other visitor told the wait to the next free
# turn, so all of them come back at the same instant to race for one turn again.
UNBOOKED_TURN_SQL = """
INSERT INTO payment_session_pace AS p (gateway, next_at)
VALUES (%(gateway)s, clock_timestamp() + make_interval(secs => %(spacing)s))
ON CONFLICT (gateway) DO UPDATE SET next_at = EXCLUDED.next_at WHERE p.next_at <= clock_timestamp()
RETURNING next_at
"""


def unbooked_turn_take(gateway: str, spacing: float):
    with connection.cursor() as cursor:
        cursor.execute(UNBOOKED_TURN_SQL, {"gateway": gateway, "spacing": spacing})
        if cursor.fetchone() is not None:
            return 0.0
        cursor.execute(
            "SELECT extract(epoch FROM next_at - clock_timestamp())::float FROM payment_session_pace "
            "WHERE gateway = %s",
            [gateway],
        )
        (wait,) = cursor.fetchone()
        raise PaymentPagesPaced(order_id=0, turn_in_ms=int(wait * 1000), retry_after_seconds=wait)


def assert_one_turn_each(outcomes) -> None:
    """At a pace of one page a second: one visitor's turn is now, and every other one is refused with the wait to
    a turn of its own (1, 2, … seconds: in turn, not all at the next one)."""
    granted = [o for o in outcomes if o.error is None]
    refused = [o.error for o in outcomes if o.error is not None]
    assert len(granted) == 1, [repr(e) for e in refused[:3]]
    assert all(isinstance(e, PaymentPagesPaced) for e in refused), refused[:3]
    assert sorted(e.retry_after for e in refused) == list(range(1, len(outcomes)))


def orders_for(make_product, make_customer, count):
    product = make_product(stock=count, price="129000.00")
    return [place_order(customer=make_customer(), items=[(product.pk, 1)]) for _ in range(count)]


@pytest.mark.django_db(transaction=True)
def test_visitors_at_the_same_instant_each_get_a_turn_of_their_own(xendit, settings, make_product, make_customer):
    settings.PAYMENT_SESSIONS_PER_SECOND = 1
    orders = orders_for(make_product, make_customer, VISITORS)
    gw = sessions.configured_gateway()

    outcomes = run_concurrently(VISITORS, lambda i: sessions.session_turn_take(gw, order_id=orders[i].pk))

    assert_one_turn_each(outcomes)
    booked = sorted(SessionTurn.objects.values_list("turn_at", flat=True))
    assert len(booked) == VISITORS - 1
    assert all(later - earlier >= timedelta(seconds=1) for earlier, later in itertools.pairwise(booked)), booked


@pytest.mark.django_db(transaction=True)
def test_control_a_pace_read_then_written_gives_every_visitor_the_same_turn(xendit, settings):
    SessionPace.objects.create(gateway="xendit", next_at="2000-01-01T00:00:00Z")
    read = threading.Barrier(VISITORS)

    outcomes = run_concurrently(VISITORS, lambda i: naive_turn_take("xendit", 1.0, read))

    assert all(o.error is None for o in outcomes)
    with pytest.raises(AssertionError):
        assert_one_turn_each(outcomes)


@pytest.mark.django_db(transaction=True)
def test_control_a_pace_without_booking_sends_every_refused_visitor_back_at_once(xendit, settings):
    outcomes = run_concurrently(VISITORS, lambda i: unbooked_turn_take("xendit", 1.0))

    assert sum(o.error is None for o in outcomes) == 1
    assert {o.error.retry_after for o in outcomes if o.error is not None} == {1}  # the herd
    with pytest.raises(AssertionError):
        assert_one_turn_each(outcomes)


def time_passes(seconds: float) -> None:
    """The database clock moves on by ``seconds`` as the pace sees it: every turn comes that much sooner."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE payment_session_pace SET next_at = next_at - make_interval(secs => %s)", [seconds])
        cursor.execute("UPDATE payment_session_turns SET turn_at = turn_at - make_interval(secs => %s)", [seconds])


@pytest.mark.django_db
def test_a_refused_visit_comes_back_to_its_own_turn_and_spends_it(api, xendit, settings, make_product, customer):
    settings.PAYMENT_SESSIONS_PER_SECOND = 1
    product = make_product(stock=4, price="129000.00")
    first, second, third, fourth = [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(4)]
    assert page(api, first).status_code == 302
    assert [page(api, order)["Retry-After"] for order in (second, third)] == ["1", "2"]

    time_passes(1.5)  # the second's turn has come, the third's is half a second away

    assert page(api, second).status_code == 302  # its own turn: not booked again behind the third
    assert not SessionTurn.objects.filter(order=second).exists()
    assert page(api, third)["Retry-After"] == "1"  # still its own turn, not a new one at the back
    assert page(api, fourth)["Retry-After"] == "2"  # a newcomer books after every turn booked before it
    assert creates(xendit) == 2

    time_passes(1)
    xendit.lose_answers = 1  # the third's page is asked for and its answer lost: the turn is spent
    assert page(api, third).json()["code"] == "gateway_unavailable"
    answer = page(api, third)
    assert (answer.status_code, answer.json()["code"]) == (503, "payment_pages_paced")  # a new turn, behind the fourth
    assert creates(xendit) == 3


@pytest.fixture
def two_orders(make_product, customer):
    product = make_product(stock=5, price="129000.00")
    return [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(2)]


@pytest.mark.django_db
@pytest.mark.parametrize("rate", [1, 0])
def test_a_visit_whose_turn_has_not_come_asks_the_gateway_nothing(api, xendit, two_orders, settings, rate):
    settings.PAYMENT_SESSIONS_PER_SECOND = rate
    first, second = two_orders
    paced, redirected = pages_counted("payment_pages_paced"), pages_counted("redirected")

    assert page(api, first).status_code == 302
    answer = page(api, second)
    assert pages_counted("redirected") == redirected + (2 if not rate else 1)
    assert pages_counted("payment_pages_paced") == paced + (0 if not rate else 1)  # what ops see on /metrics

    if not rate:  # control: not paced, the second page opens at once
        assert answer.status_code == 302 and creates(xendit) == 2
        return
    body = answer.json()
    assert 0 < body.pop("turn_in_ms") <= 1000  # its own turn, one spacing after the first's
    assert (answer.status_code, body) == (
        503,
        {
            "error": "Payment pages are being prepared in turn; your order is still reserved, retry shortly.",
            "code": "payment_pages_paced",
            "order_id": second.pk,
        },
    )
    assert answer["Retry-After"] == "1"
    assert creates(xendit) == 1
    assert not PaymentSession.objects.filter(order=second).exists()
    assert not GatewayTransaction.objects.filter(order=second).exists()


@pytest.mark.django_db
def test_a_browser_waiting_for_its_turn_gets_a_page_that_asks_again_by_itself(api, xendit, two_orders, settings):
    """The same 503 and Retry-After as the JSON answer an API client gets (the test above), as an HTML page."""
    settings.PAYMENT_SESSIONS_PER_SECOND = 1
    first, second = two_orders
    paced = pages_counted("payment_pages_paced")
    assert page(api, first, **BROWSER).status_code == 302

    answer = page(api, second, **BROWSER)

    assert (answer.status_code, answer["Retry-After"], answer["Content-Type"]) == (503, "1", "text/html; charset=utf-8")
    assert b'<meta http-equiv="refresh" content="1">' in answer.content
    reload = re.search(rb"setTimeout\(function \(\) \{ location.reload\(\); \}, (\d+)\)", answer.content)
    assert reload and 0 < int(reload[1]) <= 1000  # where scripts run, at its turn to the millisecond
    assert pages_counted("payment_pages_paced") == paced + 1
    assert creates(xendit) == 1
    xendit.stalled.add("create")  # a gateway that does not answer: the same page, with the gateway's wait
    settings.PAYMENT_SESSIONS_PER_SECOND = 0
    unavailable = page(api, second, **BROWSER)
    assert (unavailable.status_code, unavailable["Retry-After"]) == (503, "5")
    assert b'content="5"' in unavailable.content and b"setTimeout" not in unavailable.content
    xendit.release.set()


@pytest.mark.django_db
def test_a_gateway_429_moves_the_next_turn_on_by_its_wait(api, xendit, two_orders, settings):
    settings.PAYMENT_SESSIONS_PER_SECOND = 1000
    first, second = two_orders
    xendit.limit_per_second = 0  # every call refused for the rate limit

    refused = page(api, first)
    xendit.limit_per_second = None
    asked = len(xendit.requests)
    answer = page(api, second)

    assert (refused.status_code, refused.json()["code"]) == (503, "gateway_unavailable")
    wait = int(refused["Retry-After"])
    assert (answer.status_code, answer.json()["code"]) == (503, "payment_pages_paced")
    assert wait - 1 <= int(answer["Retry-After"]) <= wait
    assert len(xendit.requests) == asked  # the gateway was not asked again before its wait was over
    booked = SessionTurn.objects.get(order=second).turn_at

    sessions.session_pace_back_off(sessions.configured_gateway(), wait_seconds=30)  # another 429

    assert SessionTurn.objects.get(order=second).turn_at - booked >= timedelta(seconds=30)  # booked turns move too
    assert int(page(api, second)["Retry-After"]) >= 30


@pytest.mark.django_db
def test_the_sandbox_and_an_unpaced_gateway_keep_no_pace(api, xendit, two_orders, settings):
    settings.PAYMENT_SESSIONS_PER_SECOND = 0
    order = two_orders[1].pk
    assert sessions.session_turn_take(sessions.configured_gateway(), order_id=order) is None
    assert page(api, two_orders[0]).status_code == 302
    assert not SessionPace.objects.exists()
    settings.PAYMENT_SESSIONS_PER_SECOND = 8  # control: paced, the row holds the next turn
    assert sessions.session_turn_take(sessions.configured_gateway(), order_id=order) is not None
    assert SessionPace.objects.filter(gateway="xendit").exists()


@pytest.mark.parametrize(
    ("gateway", "rate", "pace", "refused"),
    [
        ("xendit", 8, 10, True),
        ("xendit", 8, 8, False),
        ("midtrans", 10, 11, True),
        ("xendit", 0, 50, False),  # not paced
        ("sandbox", 8, 50, False),  # no gateway pages
    ],
)
def test_start_up_refuses_a_default_pace_above_the_page_rate(settings, gateway, rate, pace, refused):
    settings.PAYMENT_GATEWAY, settings.PAYMENT_SESSIONS_PER_SECOND, settings.QUEUE_ADMIT_PER_SECOND = (
        gateway,
        rate,
        pace,
    )
    assert [e.id for e in checks.queue_pace_within_page_pace()] == (["payments.E014"] if refused else [])


@pytest.mark.django_db
def test_a_queue_pace_above_the_page_rate_is_refused_where_it_is_set(make_product, settings):
    settings.PAYMENT_GATEWAY, settings.PAYMENT_SESSIONS_PER_SECOND = "xendit", 8
    product = make_product(stock=5)

    with pytest.raises(InvalidInput) as refused:
        queue_services.queue_set(product_id=product.pk, admit_per_second=9)
    assert refused.value.fields == {"admit_per_second": ["at most 8"]}
    with pytest.raises(InvalidInput):
        queue_services.queue_reset(product_id=product.pk, admit_per_second=9)
    with pytest.raises(CommandError, match="--admit-per-second: The pace must not exceed the payment pages' \\(8"):
        call_command("flash_sale_setup", product=product.pk, stock=5, queue=True, admit_per_second=9, stdout=StringIO())
    form = ProductQueueForm(data={"product": product.pk, "admit_per_second": 9, "paused": False})
    assert not form.is_valid() and "admit_per_second" in form.errors
    assert not ProductQueue.objects.exists()

    queue_services.queue_set(product_id=product.pk, admit_per_second=8)  # control: at the page rate
    assert ProductQueue.objects.get(product_id=product.pk).admit_per_second == 8
    settings.PAYMENT_GATEWAY = "sandbox"  # control: the sandbox creates no pages
    queue_services.queue_set(product_id=product.pk, admit_per_second=50)
    assert ProductQueue.objects.get(product_id=product.pk).admit_per_second == 50


RECONCILED = 15  # orders: more than the fake's 10 a second


@pytest.mark.django_db
@pytest.mark.parametrize("rate", [8, 0])
def test_reconciliation_asks_within_the_gateways_limit_and_again_after_a_429(
    api, xendit, settings, make_product, customer, rate
):
    settings.PAYMENT_SESSIONS_PER_SECOND = 0
    product = make_product(stock=RECONCILED, price="129000.00")
    for _ in range(RECONCILED):
        order = place_order(customer=customer, items=[(product.pk, 1)])
        assert page(api, order).status_code == 302
        assert api.post(f"/v1/orders/{order.pk}/cancel").status_code == 200
    xendit.limit_per_second = 10  # Xendit's published limit, per endpoint
    settings.PAYMENT_SESSIONS_PER_SECOND = rate

    code, output = reconcile()

    assert code == 0 and output.startswith("reconcile_payments: 0 mismatches"), output
    if rate:
        assert xendit.answered_429 == 0  # paced: every order asked about within the limit
    else:  # control: unpaced, the gateway refuses some; each is asked again after its wait, and reached
        assert xendit.answered_429 > 0


@pytest.mark.django_db
def test_a_visit_long_after_its_turn_books_again(api, xendit, settings, make_product, customer):
    """Away for longer than TURN_LATE_SECONDS: its old turn now would bunch with the turns booked after it."""
    settings.PAYMENT_SESSIONS_PER_SECOND = 1
    product = make_product(stock=5, price="129000.00")
    orders = [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(5)]
    assert page(api, orders[0]).status_code == 302
    assert [page(api, order)["Retry-After"] for order in orders[1:]] == ["1", "2", "3", "4"]

    time_passes(1 + sessions.TURN_LATE_SECONDS + 0.5)  # the second order's turn is that long gone, the fifth's to come

    answer = page(api, orders[1])
    assert (answer.status_code, answer.json()["code"]) == (503, "payment_pages_paced")  # a new turn, after the fifth's
    assert answer.json()["turn_in_ms"] > 1000
    assert creates(xendit) == 1
