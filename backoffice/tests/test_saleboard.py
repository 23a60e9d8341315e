"""The sale board (backoffice/views.py, backoffice/saleboard.py): who may see it, what one refresh says after
checkouts, payments, expiries and refusals, and that reading it waits for no lock a checkout holds."""

import json
import threading
import urllib.request

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from backoffice import opsmetrics, saleboard
from checkout.testing import place_order
from checkout.tests.test_checkout_http_race import post_checkout_once
from devtools.processes import Gunicorn
from devtools.testing import ThreadRun, make_overdue, run_concurrently
from inventory.permissions import ensure_ops_groups
from orders.models import Order
from payments import services as payment_services
from payments.models import PaymentSession, UnmatchedPayment
from skincare.tests.test_metrics import _url as database_url_for_children
from waitingroom import services as queue_services
from waitingroom.models import QueuePass
from waitingroom.testing import admit_now, lapse_admissions, queue_product

pytestmark = pytest.mark.django_db(transaction=True)

PAGE, DATA = "sale-board", "sale-board-data"


@pytest.fixture
def viewer(client):
    user = get_user_model().objects.create_user(username="ops-viewer", password="pw-viewer", is_staff=True)
    ensure_ops_groups()["ops_viewers"].user_set.add(user)
    client.force_login(user)
    return client


def product_on_board(data, product_id):
    [found] = [p for p in data["products"] if p["id"] == product_id]
    return found


def checkout_over_http(token, product_id, qty=1):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.post("/v1/checkout", {"items": [{"product_id": product_id, "qty": qty}]}, format="json")


def pay(order):
    return payment_services.payment_event_apply(
        event_id=f"evt-board-{order.pk}",
        event_type="payment.succeeded",
        order_id=order.pk,
        amount=order.total,
        currency=settings.SHOP_CURRENCY,
    )


def test_staff_without_the_view_permission_is_refused(client):
    user = get_user_model().objects.create_user(username="plain-staff", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(reverse(PAGE)).status_code == 403
    response = client.get(reverse(DATA))
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"


def test_anonymous_is_sent_to_the_login_page(client):
    response = client.get(reverse(PAGE))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5", "٣", str(2**63), "9" * 40, ""])
def test_a_pinned_product_that_is_not_a_product_id_is_refused(viewer, make_product, value):
    product = make_product(stock=5)
    response = viewer.get(reverse(DATA), {"product": [product.pk, value]})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert list(response.json()["fields"]) == ["product"]


def test_a_pinned_product_is_shown_whatever_the_size_of_its_id(viewer, make_product):
    with connection.cursor() as cursor:  # ids of thirteen digits from here on (sequences ignore the rollback)
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('products', 'id'), greatest(last_value, 10^12)::bigint) "
            "FROM products_id_seq"
        )
    product = make_product(stock=5)
    assert len(str(product.pk)) >= 13  # an id the board once dropped as "not a number" (more than nine digits)
    largest = 2**63 - 1  # no such product: nothing to show, and no error
    response = viewer.get(reverse(DATA), {"product": [product.pk, largest]})
    assert response.status_code == 200
    assert product_on_board(response.json(), product.pk)["id"] == product.pk


def test_the_page_needs_no_external_script(viewer):
    response = viewer.get(reverse(PAGE))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="outcome-chart"' in html
    assert "fetch(" in html
    assert reverse(DATA) in html
    assert "<script src" not in html.replace('<script src="/static/', "")  # only the admin's own static files
    assert "https://" not in html.split("<script>")[1]


def test_one_refresh_after_checkouts_payments_expiries_and_refusals(viewer, make_product, make_customer):
    product = make_product(stock=5)
    quiet = make_product(stock=5)  # no window, nothing sold: not on the board
    before = opsmetrics.checkout_snapshot()["outcomes"]
    customers = [make_customer() for _ in range(7)]
    orders = []
    for customer in customers[:5]:
        response = checkout_over_http(customer.api_token, product.pk)
        assert response.status_code == 201, response.content
        orders.append(Order.objects.get(pk=response.json()["order_id"]))
    for customer in customers[5:]:  # sold out: two refusals
        assert checkout_over_http(customer.api_token, product.pk).json()["code"] == "stock_conflict"
    assert pay(orders[0]) == "paid"
    assert pay(orders[1]) == "paid"
    make_overdue(orders[2])  # unpaid past its deadline: the sweeper is behind for this one

    data = viewer.get(reverse(DATA)).json()
    board = product_on_board(data, product.pk)
    assert quiet.pk not in [p["id"] for p in data["products"]]
    assert (board["available"], board["reserved"], board["sold"]) == (0, 3, 2)
    assert board["window"]["state"] == "no_window"
    assert sum(board["per_second"]["orders_created"]) == 5
    assert sum(board["per_second"]["orders_paid"]) == 2
    assert len(board["per_second"]["orders_created"]) == saleboard.SERIES_SECONDS
    assert board["held"]["units"] == 3
    expiries = board["held"]["next_expiries"]
    assert sum(e["units"] for e in expiries) == 3
    assert expiries[0]["in_seconds"] < 0  # the overdue one comes first
    assert data["sweeper"]["overdue_reservations"] == 1
    assert data["sweeper"]["lag_seconds"] >= 1
    assert board["queue"] is None
    outcomes = data["checkout"]["outcomes"]
    assert outcomes["created"] - before.get("created", 0) == 5
    assert outcomes["stock_conflict"] - before.get("stock_conflict", 0) == 2
    assert data["checkout"]["latency"]["count"] >= 7

    # The sweeper catches up: lag back to 0, the units are available again, an expiry in the chart.
    call_command_sweep()
    data = viewer.get(reverse(DATA)).json()
    board = product_on_board(data, product.pk)
    assert (board["available"], board["reserved"], board["sold"]) == (1, 2, 2)
    assert sum(board["per_second"]["orders_expired"]) == 1
    assert data["sweeper"] == {
        "overdue_reservations": 0,
        "lag_seconds": 0,
        "orders_to_reconcile": 0,
        "unmatched_payments": 0,
    }


def call_command_sweep():
    from django.core.management import call_command

    call_command("expire_reservations", verbosity=0)


def test_sale_window_state_and_buckets(viewer, make_product):
    product = make_product(stock=16, buckets=4)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE products SET sale_starts_at = now() + interval '90 seconds', "
            "sale_ends_at = now() + interval '1 hour' WHERE id = %s",
            [product.pk],
        )
    board = product_on_board(viewer.get(reverse(DATA)).json(), product.pk)
    assert board["window"]["state"] == "scheduled"
    assert 80 < board["window"]["seconds_to_start"] <= 90
    assert [(b["bucket"], b["available"]) for b in board["buckets"]] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    pinned = make_product(stock=1)
    data = viewer.get(reverse(DATA), {"product": [str(pinned.pk)]}).json()
    assert product_on_board(data, pinned.pk)["window"]["state"] == "no_window"


def queued_products(make_product, make_customer, count):
    """``count`` products on sale now, each with a queue and two passes: one waiting, one expired."""
    products = [make_product(stock=1) for _ in range(count)]
    for product in products:
        queue_product(product, starts_in=-1)
        for _ in range(2):
            queue_services.queue_join(customer=make_customer(), product_id=product.pk)
        admit_now(product)  # the pass at the front is admitted (one unit: one admission) ...
        lapse_admissions(product)  # ... and lets its admission expire
    return products


def test_one_refresh_is_a_fixed_number_of_statements_however_many_products(make_product, make_customer):
    """What the module's docstring says: REFRESH_STATEMENTS statements, one transaction opened as REPEATABLE READ
    READ ONLY, the queue panel inside it with one statement for every product (counted by Django's statement
    capture on the real database, BEGIN and COMMIT included, for 1 and for 6 products with a queue)."""
    few = queued_products(make_product, make_customer, 1)
    with CaptureQueriesContext(connection) as one:
        data = saleboard.board(pinned=[p.pk for p in few])
    many = few + queued_products(make_product, make_customer, 5)
    with CaptureQueriesContext(connection) as six:
        data = saleboard.board(pinned=[p.pk for p in many])

    assert saleboard.REFRESH_STATEMENTS == 8
    assert len(one.captured_queries) == len(six.captured_queries) == saleboard.REFRESH_STATEMENTS, [
        q["sql"][:60] for q in six.captured_queries
    ]
    statements = [q["sql"] for q in six.captured_queries]
    assert statements[:2] == ["BEGIN", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"]
    assert statements[-1] == "COMMIT"
    assert sum("product_queues" in q["sql"] for q in six.captured_queries) == 1
    queues = [product_on_board(data, p.pk)["queue"] for p in many]
    assert [(q["waiting"], q["admitted"], q["expired"]) for q in queues] == [(1, 0, 1)] * 6


def refresh_while_another_transaction_commits(product, customer, *, inside_a_transaction):
    """One refresh of the board; right after its first SELECT another connection commits a new pass in the
    product's queue. Returns the queue panel's waiting count."""

    def join_meanwhile(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql == saleboard.LEDGER_CUTOFF_SQL:
            joined = ThreadRun(lambda: queue_services.queue_join(customer=customer, product_id=product.pk))
            assert joined.join().error is None
        return result

    with connection.execute_wrapper(join_meanwhile):
        if inside_a_transaction:  # the board then reads on the caller's READ COMMITTED transaction
            with transaction.atomic():
                data = saleboard.board(pinned=[product.pk])
        else:
            data = saleboard.board(pinned=[product.pk])
    return product_on_board(data, product.pk)["queue"]["waiting"]


def test_one_refresh_reads_one_snapshot(make_product, make_customer):
    """A pass committed between the refresh's first and last statements is not on the board: every statement read
    the snapshot the first one took. Control: the same refresh inside a READ COMMITTED transaction (each statement
    its own snapshot) does show it, so the test sees a board that is not one snapshot."""
    [product] = queued_products(make_product, make_customer, 1)
    assert refresh_while_another_transaction_commits(product, make_customer(), inside_a_transaction=False) == 1
    assert QueuePass.objects.filter(product=product).count() == 3  # the join did commit meanwhile
    assert refresh_while_another_transaction_commits(product, make_customer(), inside_a_transaction=True) == 3


def test_a_refresh_waits_for_no_lock_a_checkout_holds(make_product, customer):
    """A checkout holds its stock row, order row and reservation locks until it commits; the board reads the same
    rows meanwhile without waiting (lock_timeout 200 ms would turn a wait into an error). Control: a reader that
    locks (FOR SHARE) what it reads does wait, and fails."""
    product = make_product(stock=3)
    place_order(customer=customer, items=[(product.pk, 1)])
    locked, release = threading.Event(), threading.Event()

    def hold_the_rows():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM stock_buckets WHERE product_id = %s FOR UPDATE", [product.pk])
            cursor.execute("SELECT 1 FROM inventory_reservations WHERE product_id = %s FOR UPDATE", [product.pk])
            cursor.execute("UPDATE orders SET updated_at = now() WHERE status = 'pending_payment'")
            locked.set()
            assert release.wait(30)

    holder = ThreadRun(hold_the_rows, name="row-holder")
    assert locked.wait(30)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            data = saleboard.board(pinned=[product.pk])
        assert product_on_board(data, product.pk)["reserved"] == 1
        with (
            pytest.raises(OperationalError, match="lock timeout"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute("SET LOCAL lock_timeout = '200ms'")
            cursor.execute("SELECT 1 FROM stock_buckets WHERE product_id = %s FOR SHARE", [product.pk])
    finally:
        release.set()
        outcome = holder.join()
    assert outcome.error is None, outcome.error


def test_histogram_quantile_matches_prometheus():
    buckets = [[0.1, 50], [0.5, 90], [1.0, 100], ["+Inf", 100]]
    assert opsmetrics.histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert opsmetrics.histogram_quantile(0.99, buckets) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert opsmetrics.histogram_quantile(0.25, buckets) == pytest.approx(0.05)
    assert opsmetrics.histogram_quantile(0.5, [[0.1, 0], ["+Inf", 0]]) is None
    assert opsmetrics.histogram_quantile(0.99, [[0.1, 0], ["+Inf", 10]]) == 0.1
    assert json.dumps(opsmetrics.checkout_snapshot())  # JSON-ready


def test_sold_counts_this_sale_only(viewer, make_product, make_customer):
    """Units paid before the window opened (an earlier sale) are not this sale's: a refresh reads this sale's
    ledger rows only."""
    product = make_product(stock=5)
    for _ in range(2):
        assert pay(place_order(customer=make_customer(), items=[(product.pk, 1)])) == "paid"
    board = product_on_board(viewer.get(reverse(DATA)).json(), product.pk)
    assert (board["sold"], board["sold_since"]) == (2, "span")  # no window: the last minutes
    with connection.cursor() as cursor:
        cursor.execute("UPDATE products SET sale_starts_at = now() WHERE id = %s", [product.pk])
    assert pay(place_order(customer=make_customer(), items=[(product.pk, 1)])) == "paid"
    board = product_on_board(viewer.get(reverse(DATA)).json(), product.pk)
    assert (board["sold"], board["sold_since"], board["available"]) == (1, "opening", 2)


def test_the_board_counts_the_orders_to_reconcile(viewer, make_product, make_customer):
    """The sessions the sweeper marked for reconciliation, counted as the sale report counts them; a session not
    marked is not counted (control: 0 before any is marked)."""
    product = make_product(stock=5)
    orders = [place_order(customer=make_customer(), items=[(product.pk, 1)]) for _ in range(3)]
    for order in orders:
        PaymentSession.objects.create(order=order, gateway="midtrans", ends_at=order.payment_expires_at)
    page = viewer.get(reverse(PAGE))
    assert b'id="to-reconcile"' in page.content
    assert viewer.get(reverse(DATA)).json()["sweeper"]["orders_to_reconcile"] == 0
    PaymentSession.objects.filter(order__in=orders[:2]).update(needs_reconciliation=True)
    assert viewer.get(reverse(DATA)).json()["sweeper"]["orders_to_reconcile"] == 2


def test_the_board_counts_the_unmatched_payments_ops_have_not_resolved(viewer):
    """Money for a transaction the shop did not issue (payments.models.UnmatchedPayment) until ops resolve it; a
    resolved one is not counted (control: 0 before any arrives)."""
    page = viewer.get(reverse(PAGE))
    assert b'id="unmatched"' in page.content
    assert viewer.get(reverse(DATA)).json()["sweeper"]["unmatched_payments"] == 0
    for i, resolved in enumerate([None, timezone.now(), None]):
        UnmatchedPayment.objects.create(
            gateway="midtrans",
            gateway_order_id=f"1-{i}",
            gateway_status="settlement",
            amount="129000.00",
            currency="IDR",
            event_id=f"midtrans-tx-{i}-settlement",
            resolved_at=resolved,
        )
    assert viewer.get(reverse(DATA)).json()["sweeper"]["unmatched_payments"] == 2


def test_under_gunicorn_the_board_reads_every_workers_counters(make_product, make_customer):
    """Three gunicorn workers each count in their own mmap file; the board's JSON, served by any one of them,
    has the instance's sum (the same reading as /metrics), and the refusals by code."""
    product = make_product(stock=20)
    buyers = [make_customer() for _ in range(24)]
    staff = get_user_model().objects.create_user(username="ops-gunicorn", password="pw-gunicorn", is_staff=True)
    ensure_ops_groups()["ops_viewers"].user_set.add(staff)
    session = SessionStore()  # what the admin login stores: the session cookie is all the board needs
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(staff.pk), "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = staff.get_session_auth_hash()
    session.save()
    with Gunicorn(database_url_for_children(), workers=3, conn_max_age=0, extra_env={"ACCESS_LOG": "false"}) as web:
        outcomes = run_concurrently(
            24, lambda i: post_checkout_once(web.base, buyers[i].api_token, [{"product_id": product.pk, "qty": 1}])
        )
        statuses = sorted(o.value[0] for o in outcomes)
        assert statuses.count(201) == 20 and statuses.count(409) == 4, statuses
        request = urllib.request.Request(
            web.base + reverse(DATA), headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={session.session_key}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            data = json.loads(response.read())
        assert len(web.worker_pids()) == 3
    assert data["checkout"]["scope"] == "instance (all gunicorn workers)"
    assert data["checkout"]["outcomes"] == {"created": 20, "stock_conflict": 4}
    assert data["checkout"]["latency"]["count"] == 24
    assert product_on_board(data, product.pk)["reserved"] == 20
