"""Sale windows at checkout (docs/sale-windows.md): 409 sale_not_started before the window, 410 sale_ended after
it, the sale price inside it; the checkout transaction's database clock decides, in the statement that reads the
quote. Then the proofs of the opening second: 300 buyers at the opening, every strategy, the end boundary, and a
window closed in the middle of a storm."""

import io
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection, connections
from rest_framework.test import APIClient

from checkout import idempotency
from checkout import services as checkout
from checkout.models import IdempotencyKey
from checkout.testing import STRATEGIES
from devtools.testing import assert_invariants, run_concurrently, wait_until
from inventory import catalogue, soldout
from inventory.exceptions import SaleNotStarted
from inventory.models import Inventory, StockMovement
from inventory.tests.test_sale_window import set_window
from orders.audit import audit_inventory
from orders.models import Order, OrderLine, Reservation
from payments.models import PaymentAttempt
from payments.tests.test_webhook import SECRET, deliver, event
from skincare.db import db_now
from skincare.timestamps import utc_z


def client_for(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    return client


def buy(client, *items, key=None):
    extra = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    body = {"items": [{"product_id": product.pk, "qty": qty} for product, qty in items]}
    return client.post("/v1/checkout", body, format="json", **extra)


def db_state():
    return (
        Order.objects.count(),
        Reservation.objects.count(),
        PaymentAttempt.objects.count(),
        StockMovement.objects.count(),
        IdempotencyKey.objects.count(),
        sorted(Inventory.objects.values_list("product_id", "available_stock", "reserved_stock")),
    )


# Inside one test transaction now() does not move: setup and checkout see the same instant, so the boundaries
# and Retry-After values below are exact.


@pytest.mark.django_db
@pytest.mark.parametrize("starts_in, retry_after", [(90.25, "91"), (0.2, "1"), (1, "1"), (0.000001, "1")])
def test_before_the_window_409_sale_not_started_with_retry_after_and_nothing_written(
    api, make_product, starts_in, retry_after
):
    product = make_product(stock=5, price="129.00")
    set_window(product, starts_in=starts_in, ends_in=3600, price="99.00")
    before = db_state()

    response = buy(api, (product, 1))

    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "sale_not_started"
    assert body["product_ids"] == [product.pk]
    product.refresh_from_db()
    assert body["starts_at"] == utc_z(product.sale_starts_at)
    assert response["Retry-After"] == retry_after
    assert db_state() == before


@pytest.mark.django_db
def test_after_the_window_410_sale_ended_and_nothing_written(api, make_product):
    product = make_product(stock=5)
    set_window(product, starts_in=-60, ends_in=0, price="5.00")  # ends exactly now: [starts_at, ends_at)
    before = db_state()

    response = buy(api, (product, 1))

    assert response.status_code == 410
    assert response.json()["code"] == "sale_ended"
    assert response.json()["product_ids"] == [product.pk]
    assert "Retry-After" not in response
    assert db_state() == before


@pytest.mark.django_db
def test_inside_the_window_the_sale_price_is_the_unit_price_and_the_amount_the_webhook_must_match(
    api, make_product, make_customer, settings
):
    settings.PAYMENT_WEBHOOK_SECRET = SECRET
    serum = make_product(stock=5, price="129000.00")
    set_window(serum, starts_in=0, ends_in=60, price="99000.00")  # opens exactly now
    plain = make_product(stock=5, price="10.00")

    response = buy(api, (serum, 2), (plain, 1))

    assert response.status_code == 201, response.json()
    order = Order.objects.get(pk=response.json()["order_id"])
    assert dict(OrderLine.objects.filter(order=order).values_list("product_id", "unit_price")) == {
        serum.pk: Decimal("99000.00"),
        plain.pk: Decimal("10.00"),
    }
    assert order.total == Decimal("198010.00") == Decimal(response.json()["total"])
    assert PaymentAttempt.objects.get(order=order).amount == order.total
    paid = deliver(event(order, amount="198010.00", event_id="evt-sale-price"))
    assert paid.status_code == 200
    order.refresh_from_db()
    assert order.status == "paid"
    other = Order.objects.get(pk=buy(client_for(make_customer()), (serum, 1)).json()["order_id"])
    at_list_price = deliver(event(other, amount="129000.00", event_id="evt-list-price"))
    assert at_list_price.json() == {"status": "amount_mismatch", "event_id": "evt-list-price"}
    assert_invariants()


@pytest.mark.django_db
def test_a_cart_is_refused_for_its_products_outside_their_windows(api, make_product):
    open_ = make_product(stock=5)
    set_window(open_, starts_in=-1, ends_in=60)
    soon = make_product(stock=5)
    set_window(soon, starts_in=5.5)
    later = make_product(stock=5)
    set_window(later, starts_in=30.1)
    over = make_product(stock=5)
    set_window(over, starts_in=-60, ends_in=-1)
    before = db_state()

    not_yet = buy(api, (open_, 1), (later, 1), (soon, 1))
    ended = buy(api, (soon, 1), (over, 1))

    assert (not_yet.status_code, not_yet.json()["code"]) == (409, "sale_not_started")
    assert not_yet.json()["product_ids"] == sorted([soon.pk, later.pk])
    assert not_yet["Retry-After"] == "31"  # when the whole cart can be bought
    later.refresh_from_db()
    assert not_yet.json()["starts_at"] == utc_z(later.sale_starts_at)
    assert (ended.status_code, ended.json()["code"], ended.json()["product_ids"]) == (410, "sale_ended", [over.pk])
    assert db_state() == before


@pytest.mark.django_db
def test_a_saved_cart_waits_for_the_opening_and_checks_out_at_the_sale_price(api, make_product):
    serum = make_product(stock=5, price="129.00")
    set_window(serum, starts_in=30.5, ends_in=3600, price="99.00")
    cart = api.post("/v1/carts", {"items": [{"product_id": serum.pk, "qty": 2}]}, format="json").json()
    before = db_state()

    early = api.post(f"/v1/carts/{cart['cart_id']}/checkout")
    assert (early.status_code, early.json()["code"], early["Retry-After"]) == (409, "sale_not_started", "31")
    assert db_state() == before
    assert api.get(f"/v1/carts/{cart['cart_id']}").json()["status"] == "open"  # the cart waits for the sale

    set_window(serum, starts_in=-1, ends_in=3600, price="99.00")  # the sale opens
    shown = api.get(f"/v1/carts/{cart['cart_id']}").json()
    bought = api.post(f"/v1/carts/{cart['cart_id']}/checkout")

    assert shown["total"] == "198.00"  # the cart shows what the checkout will charge
    assert bought.status_code == 201, bought.json()
    assert bought.json()["total"] == "198.00"
    set_window(serum, starts_in=-60, ends_in=-1, price="99.00")
    late = api.post("/v1/carts", {"items": [{"product_id": serum.pk, "qty": 1}]}, format="json").json()
    ended = api.post(f"/v1/carts/{late['cart_id']}/checkout")
    assert (ended.status_code, ended.json()["code"]) == (410, "sale_ended")
    assert_invariants()


@pytest.mark.django_db
def test_a_409_sale_not_started_is_not_stored_so_the_same_key_buys_once_the_sale_opens(api, make_product):
    product = make_product(stock=5, price="20.00")
    set_window(product, starts_in=10, ends_in=60, price="15.00")

    early = buy(api, (product, 1), key="opening-click")
    assert (early.status_code, early.json()["code"]) == (409, "sale_not_started")
    assert IdempotencyKey.objects.count() == 0  # retryable (Retry-After): never stored
    set_window(product, starts_in=-1, ends_in=60, price="15.00")  # the sale opens
    bought = buy(api, (product, 1), key="opening-click")
    replayed = buy(api, (product, 1), key="opening-click")

    assert bought.status_code == 201
    assert bought.json()["total"] == "15.00"
    assert replayed.status_code == 201 and replayed["Idempotent-Replayed"] == "true"
    assert replayed.json() == bought.json()
    assert Order.objects.count() == 1
    assert_invariants()


@pytest.mark.django_db
def test_control_a_stored_sale_not_started_would_replay_409_after_the_opening(api, make_product, monkeypatch):
    """CONTROL: the naive rule "store every 4xx under its key" burns the client's key before the sale opens."""
    monkeypatch.setattr(idempotency, "replayable", lambda exc: 400 <= exc.http_status < 500)
    product = make_product(stock=5)
    set_window(product, starts_in=10, ends_in=60)

    buy(api, (product, 1), key="opening-click")
    set_window(product, starts_in=-1, ends_in=60)
    after_opening = buy(api, (product, 1), key="opening-click")

    assert (after_opening.status_code, after_opening.json()["code"]) == (409, "sale_not_started")
    assert after_opening["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 0


@pytest.mark.django_db
def test_a_410_sale_ended_is_stored_and_replayed(api, make_product):
    product = make_product(stock=5)
    set_window(product, starts_in=-60, ends_in=-1)
    first = buy(api, (product, 1), key="too-late")
    set_window(product)  # window removed afterwards: the key still answers what it answered
    again = buy(api, (product, 1), key="too-late")
    assert first.status_code == again.status_code == 410
    assert again["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_early_refusals_do_not_feed_the_sold_out_memory_and_limits_hold_in_the_window(
    make_product, make_customer, settings
):
    settings.SOLD_OUT_CACHE_MS = 250
    product = make_product(stock=2, price="50.00")
    set_window(product, starts_in=5, ends_in=60, price="40.00", max_per_customer=1)
    alice, bob, carol = (client_for(make_customer()) for _ in range(3))

    assert buy(alice, (product, 1)).json()["code"] == "sale_not_started"
    assert soldout.known_short({product.pk: 1}) == []  # not mistaken for sold out
    set_window(product, starts_in=-1, ends_in=60, price="40.00", max_per_customer=1)
    assert buy(alice, (product, 1)).status_code == 201
    assert buy(alice, (product, 1)).json()["code"] == "purchase_limit_exceeded"
    assert buy(bob, (product, 1)).status_code == 201
    assert buy(carol, (product, 1)).json()["code"] == "stock_conflict"
    assert soldout.known_short({product.pk: 1}) == [product.pk]
    assert buy(carol, (product, 1)).json()["code"] == "stock_conflict"  # refused from memory
    assert_invariants()


# ---- The opening second, on committed data, with real threads and their own connections.


def db_clock_reached(moment, *, lead=timedelta(0)):
    """Poll the database clock (a fresh statement each time) until it is at ``moment - lead``."""

    def reached():
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp() >= %s", [moment - lead])
            return cursor.fetchone()[0]

    wait_until(reached, timeout=30, what=f"database clock at {moment - lead}")


def setup_sale(product, *args):
    out = io.StringIO()
    call_command("flash_sale_setup", "--product", str(product.pk), *args, stdout=out)
    product.refresh_from_db()
    return out.getvalue()


RETRYABLE = {(409, "lock_busy"), (503, "busy")}


def buy_at_opening(client, product, starts_at):
    """A buyer at the opening, as a well-behaved frontend: a 409 sale_not_started waits until the database clock
    passes starts_at (polling) and fires again; lock_busy / busy are retried at once (bounded). Returns the answers."""
    answers = []
    for _ in range(200):
        response = buy(client, (product, 1))
        code = response.json().get("code")
        answers.append((response.status_code, code, response.get("Retry-After")))
        if code == "sale_not_started":
            db_clock_reached(starts_at)
        elif (response.status_code, code) not in RETRYABLE:
            return answers
    raise AssertionError(f"no final answer after 200 attempts: {answers[-3:]}")


def assert_sale_sold_exactly(product, *, stock, price, buyers):
    orders = Order.objects.filter(lines__product=product)
    assert orders.count() == stock
    assert orders.filter(created_at__lt=product.sale_starts_at).count() == 0  # never before the opening
    assert set(orders.values_list("total", flat=True)) == {Decimal(price)}
    assert set(OrderLine.objects.filter(product=product).values_list("qty", "unit_price")) == {(1, Decimal(price))}
    assert orders.values("customer").distinct().count() == stock  # one per customer
    assert {c.pk for c in buyers} >= set(orders.values_list("customer_id", flat=True))
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (0, stock)
    assert audit_inventory() == []
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_opening_second_300_buyers_no_order_before_starts_at_exactly_the_stock_at_the_sale_price(
    make_product, make_customer, settings
):
    settings.SOLD_OUT_CACHE_MS = 250  # as in production
    stock, buyers_count, early_count = 50, 300, 10
    product = make_product(stock=1, price="129000.00")
    buyers = [make_customer() for _ in range(buyers_count)]
    impatient_customers = [make_customer() for _ in range(early_count)]
    impatient = [client_for(c) for c in impatient_customers]
    clients = [client_for(b) for b in buyers]
    opening = threading.Barrier(buyers_count + 1)
    answers: list[list] = [[] for _ in range(buyers_count)]
    errors: list[BaseException] = []

    def buyer(i):
        try:
            opening.wait(timeout=120)
            answers[i] = buy_at_opening(clients[i], product, product.sale_starts_at)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=buyer, args=(i,), name=f"opening-{i}") for i in range(buyers_count)]
    for thread in threads:
        thread.start()
    output = setup_sale(
        product, "--stock", str(stock), "--starts-in", "2", "--duration", "600", "--price", "99000",
        "--max-per-customer", "1",
    )  # fmt: skip
    assert "sale scheduled" in output

    # Buyers who fire right after the setup (fast clocks, impatient fingers). Each then reads the database clock: an
    # answer that came back before sale_starts_at was decided before it and must be a 409 with Retry-After, nothing
    # written. (On a loaded machine the last of them may land after the opening: then any answer is fair.)
    def impatient_buyer(i):
        response = buy(impatient[i], (product, 1))
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp() < %s", [product.sale_starts_at])
            return response, cursor.fetchone()[0]

    early = run_concurrently(early_count, impatient_buyer)
    assert [o.error for o in early if o.error] == []
    before_opening = [response for response, before in (o.value for o in early) if before]
    assert before_opening, "no impatient buyer was answered before the opening: the machine is far too slow"
    assert {(r.status_code, r.json()["code"], r["Retry-After"] in ("1", "2")) for r in before_opening} == {
        (409, "sale_not_started", True)
    }
    early_sales = sum(1 for o in early if o.value[0].status_code == 201)
    # Everyone else is released just before the opening by the database clock: some land before it.
    db_clock_reached(product.sale_starts_at, lead=timedelta(milliseconds=30))
    opening.wait(timeout=120)
    for thread in threads:
        thread.join(120)
    assert not [t.name for t in threads if t.is_alive()]
    assert errors == []

    finals = [a[-1][:2] for a in answers]
    assert finals.count((201, None)) == stock - early_sales
    assert set(finals) == {(201, None), (409, "stock_conflict")}
    refused_early = [a for a in answers if a[0][1] == "sale_not_started"]
    assert all(a[0][2] == "1" for a in refused_early)  # less than a second to go: Retry-After 1
    assert all(code != "sale_not_started" for a in answers for _s, code, _r in a[1:])  # one wait was enough
    assert_sale_sold_exactly(product, stock=stock, price="99000.00", buyers=buyers + impatient_customers)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_opens_on_time_and_sells_exactly_the_stock_at_the_sale_price(
    make_product, make_customer, strategy
):
    stock, buyers_count = 5, 24
    product = make_product(stock=1, price="30.00", strategy=strategy)
    buyers = [make_customer() for _ in range(buyers_count)]
    clients = [client_for(b) for b in buyers]
    setup_sale(product, "--stock", str(stock), "--starts-in", "0.6", "--duration", "600", "--price", "20.00",
               "--max-per-customer", "1")  # fmt: skip
    db_clock_reached(product.sale_starts_at, lead=timedelta(milliseconds=100))

    outcomes = run_concurrently(buyers_count, lambda i: buy_at_opening(clients[i], product, product.sale_starts_at))

    assert [o.error for o in outcomes if o.error] == []
    finals = [o.value[-1][:2] for o in outcomes]
    assert finals.count((201, None)) == stock
    assert set(finals) == {(201, None), (409, "stock_conflict")}
    assert_sale_sold_exactly(product, stock=stock, price="20.00", buyers=buyers)


@pytest.mark.django_db(transaction=True)
def test_a_buyer_at_the_end_boundary_gets_410_once_the_database_clock_passes_ends_at(api, make_product):
    product = make_product(stock=5, price="30.00")
    setup_sale(product, "--stock", "5", "--starts-in", "0", "--duration", "3", "--price", "20.00")

    inside = buy(api, (product, 1))
    db_clock_reached(product.sale_ends_at)
    before = db_state()
    after = buy(api, (product, 1))

    assert inside.status_code == 201 and inside.json()["total"] == "20.00"
    assert (after.status_code, after.json()["code"]) == (410, "sale_ended")
    assert db_state() == before
    assert Order.objects.filter(created_at__gte=product.sale_ends_at).count() == 0
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_a_window_closed_mid_storm_sells_nothing_after_the_edit(make_product, make_customer, settings):
    """A stock manager ends the sale now while 20 buyers keep buying: every checkout that starts after the edit
    committed gets 410; the ones in flight at that moment finish as they decided; units and ledger stay exact."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # each buyer buys again and again
    product = make_product(stock=1000, price="30.00")
    setup_sale(product, "--stock", "1000", "--starts-in", "0", "--duration", "600", "--price", "20.00")
    clients = [client_for(make_customer()) for _ in range(20)]
    closed = threading.Event()

    def keep_buying(i):
        attempts = []
        for _ in range(2000):
            started_after_close = closed.is_set()
            response = buy(clients[i], (product, 1))
            attempts.append((started_after_close, response.status_code, response.json().get("code")))
            if response.status_code == 410:
                return attempts
        raise AssertionError("the sale never ended for this buyer")

    def stock_manager(i):
        if i < 20:
            return keep_buying(i)
        wait_until(lambda: Order.objects.count() >= 40, timeout=60, what="40 orders in the storm")
        ends_at = db_now()  # "end it now", as the admin's "now" shortcut would
        catalogue.product_sale_set(
            product_id=product.pk,
            starts_at=product.sale_starts_at,
            ends_at=ends_at,
            sale_price=Decimal("20.00"),
            max_per_customer=None,
        )
        closed.set()
        return ends_at

    outcomes = run_concurrently(21, stock_manager)

    assert [o.error for o in outcomes if o.error] == []
    product.refresh_from_db()
    attempts = [a for o in outcomes[:20] for a in o.value]
    assert {(s, c) for after, s, c in attempts if after} == {(410, "sale_ended")}
    assert {(s, c) for _after, s, c in attempts} <= {(201, None), (410, "sale_ended")}
    sold = sum(1 for _after, s, _c in attempts if s == 201)
    in_flight_at_edit = Order.objects.filter(created_at__gte=product.sale_ends_at).count()
    assert in_flight_at_edit <= 20  # at most one checkout per buyer was under way when the edit committed
    assert Order.objects.count() == sold >= 40
    inventory = Inventory.objects.get(product=product)
    assert (inventory.available_stock, inventory.reserved_stock) == (1000 - sold, sold)
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_a_web_server_clock_running_fast_sells_before_the_opening(make_product, make_customer, monkeypatch):
    """CONTROL: the naive check compares the window with the web server's clock (here a minute fast, as clocks
    drift) instead of the checkout transaction's database clock: orders are created before sale_starts_at. The
    sale opens 30 s after the setup, so however slow the machine, the buyers fire before it."""
    from django.utils import timezone

    def by_the_web_server_clock(state):
        quotes = state.quotes
        fast_now = timezone.now() + timedelta(seconds=60)
        early = [pid for pid, q in quotes.items() if q.sale_starts_at is not None and fast_now < q.sale_starts_at]
        if early:
            raise SaleNotStarted(product_ids=early, starts_at=quotes[early[0]].sale_starts_at, retry_after_seconds=1)

    steps = tuple(
        by_the_web_server_clock if step is checkout.refuse_outside_sale_window else step for step in checkout.OPEN_ORDER
    )
    monkeypatch.setattr(checkout, "OPEN_ORDER", steps)
    product = make_product(stock=1, price="30.00")
    clients = [client_for(make_customer()) for _ in range(5)]
    setup_sale(product, "--stock", "5", "--starts-in", "30", "--duration", "600")

    outcomes = run_concurrently(5, lambda i: buy(clients[i], (product, 1)).status_code)

    assert [o.error for o in outcomes if o.error] == []
    assert Order.objects.filter(created_at__lt=product.sale_starts_at).count() == 5
