"""The waiting room's proofs, on committed data with real threads released by a barrier; each
protection has a control that shows the naive version fails. The clock is moved through the database (a sale
window set in the past, a queue's credit clock moved back), never by sleeping.

* 1,000 customers join before the opening in a known order: their places are uncorrelated with it (Spearman's
  rank correlation |rho| < 0.15, i.e. more than four standard deviations of chance, 1/sqrt(999) = 0.032).
  Control: placed by arrival (no shuffle) rho is 1.
* After the opening, under concurrent joins (80, in four waves) and a concurrent advancer, a customer whose join returned before
  another's began is placed and admitted before it. Control: placing late joiners by the draw breaks it.
* One pass per customer under 50 concurrent joins. Control: check-then-insert makes 50.
* No checkout of a queued product without an admission. Control: without the check, the unadmitted buy.
* Admissions never exceed the pace (per advance and in total, with 8 concurrent sweepers). Control: without the
  pace everyone is admitted at once.
* A returned unit (an expired reservation, by the sweeper loop itself) admits the next waiting buyer. Control: a
  quota fixed at the opening never admits them.
* Sold out ends the queue: every waiting pass answers sold_out, joins are refused.
* Nothing oversold, the audit clean after every test.
"""

import threading
import time

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, connections

from checkout.testing import place
from devtools.testing import assert_invariants, backends, make_overdue, run_concurrently, wait_until
from inventory.exceptions import StockConflict
from orders.models import Order
from payments import services as payment_services
from skincare.db import db_now
from waitingroom import admission, joins, services
from waitingroom.exceptions import AdmissionRequired, QueueSoldOut
from waitingroom.models import ProductQueue, QueuePass
from waitingroom.selectors import pass_get
from waitingroom.testing import (
    admit_now,
    admitted_positions,
    queue_product,
    reset_queue_clock,
    rewind_queue_clock,
    sale_starts_in,
)

pytestmark = pytest.mark.django_db(transaction=True)

SHUFFLE = "CASE WHEN qp.early THEN qp.draw END, "


def place_sql_with(old, new):
    """PLACE_SQL with ``old`` replaced by ``new``, for a control; ``old`` must be there, so a control whose text no
    longer matches fails on its set-up instead of passing or failing by accident."""
    assert services.PLACE_SQL.count(old) == 1, old
    return services.PLACE_SQL.replace(old, new)


def make_customers(n, prefix):
    User.objects.bulk_create([User(username=f"{prefix}-{i}") for i in range(n)])
    return list(User.objects.filter(username__startswith=f"{prefix}-").order_by("id"))


def spearman(xs, ys):
    """Spearman's rho of two lists of distinct values."""
    n = len(xs)
    rank_x = {v: r for r, v in enumerate(sorted(xs))}
    rank_y = {v: r for r, v in enumerate(sorted(ys))}
    d2 = sum((rank_x[x] - rank_y[y]) ** 2 for x, y in zip(xs, ys, strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


def early_joiners_rho(make_product, prefix):
    """1,000 customers join before the opening one after the other; the sale opens; one advance places them.
    Returns the rank correlation of join order and place, and the places (for the uniqueness check)."""
    product = make_product(stock=1000)
    queue_product(product, pace=100, starts_in=600)
    customers = make_customers(1000, prefix)
    for customer in customers:
        services.queue_join(customer=customer, product_id=product.pk)
    sale_starts_in(product, -1)
    services.queue_advance(product_id=product.pk)
    positions = dict(QueuePass.objects.filter(product=product).values_list("customer_id", "position"))
    join_order = list(range(len(customers)))
    places = [positions[c.pk] for c in customers]
    return spearman(join_order, places), places


def test_early_joiners_are_placed_in_an_order_uncorrelated_with_their_arrival(make_product):
    rho, places = early_joiners_rho(make_product, "early")
    assert sorted(places) == list(range(1, 1001))  # unique, dense
    assert abs(rho) < 0.15, rho
    assert_invariants()


def test_control_without_the_shuffle_the_order_is_the_arrival_order(make_product, monkeypatch):
    monkeypatch.setattr(services, "PLACE_SQL", place_sql_with(SHUFFLE, ""))
    rho, _places = early_joiners_rho(make_product, "noshuffle")
    assert rho > 0.99


def later_joiners_overtaken(make_product, prefix):
    """80 customers join after the opening in 4 concurrent waves of 20. An advancer thread places and admits while
    wave 2 joins (so joins and placements interleave) and is idle during waves 0 and 1 (so its first placement
    takes the passes of both: the control's overtaking needs one placement of two waves) and wave 3. Returns the
    pairs (earlier, later) — the earlier's join returned before the later's began — where the later one was placed
    or admitted first."""
    product = make_product(stock=10_000)
    queue_product(product, pace=1000, starts_in=-1)
    customers = make_customers(80, prefix)
    joined = {}  # customer id -> (started, returned) by one monotonic clock
    stop, running = threading.Event(), threading.Event()

    def advancer():
        try:
            while not stop.is_set():
                if running.wait(timeout=0.05):
                    rewind_queue_clock(product, 0.01)  # ten admissions' worth per advance
                    services.queue_advance(product_id=product.pk)
        finally:
            connections.close_all()

    thread = threading.Thread(target=advancer, name="advancer")
    thread.start()
    try:
        for wave in range(4):
            batch = customers[wave * 20 : (wave + 1) * 20]

            def join(i, batch=batch):
                started = time.monotonic()
                services.queue_join(customer=batch[i], product_id=product.pk)
                joined[batch[i].pk] = (started, time.monotonic())

            if wave == 2:
                running.set()
            outcomes = run_concurrently(20, join)
            running.clear()
            assert [o.error for o in outcomes if o.error] == []
    finally:
        stop.set()
        thread.join(60)
    admit_now(product)
    rows = {
        cid: (position, admitted_at)
        for cid, position, admitted_at in QueuePass.objects.filter(product=product).values_list(
            "customer_id", "position", "admitted_at"
        )
    }
    assert sorted(p for p, _a in rows.values()) == list(range(1, 81))
    assert admitted_positions(product) == list(range(1, 81))
    return [
        (a, b)
        for a in joined
        for b in joined
        if joined[a][1] < joined[b][0] and (rows[a][0] > rows[b][0] or rows[a][1] > rows[b][1])
    ]


def test_after_the_opening_a_later_joiner_is_never_placed_or_admitted_before_an_earlier_one(make_product):
    assert later_joiners_overtaken(make_product, "late") == []
    assert_invariants()


def test_control_placing_later_joiners_by_the_draw_lets_them_overtake(make_product, monkeypatch):
    monkeypatch.setattr(
        services, "PLACE_SQL", place_sql_with("NOT qp.early, " + SHUFFLE + "qp.joined_at, qp.id", "qp.draw")
    )
    assert later_joiners_overtaken(make_product, "lateshuffled") != []


def test_fifty_concurrent_joins_of_one_customer_make_one_pass(make_product, customer):
    product = make_product(stock=5)
    queue_product(product, starts_in=60)

    outcomes = run_concurrently(50, lambda i: services.queue_join(customer=customer, product_id=product.pk))

    assert [o.error for o in outcomes if o.error] == []
    created = [o.value[0] for o in outcomes if o.value[1]]
    assert len(created) == 1
    assert {o.value[0].pass_id for o in outcomes} == {created[0].pass_id}
    assert QueuePass.objects.filter(product=product, customer=customer).count() == 1


def test_control_check_then_insert_makes_a_pass_per_request(make_product, customer):
    """The naive join: look for the customer's pass, insert one if none, in a table without the unique constraint.
    A barrier between the look and the insert lets every request see "none"."""
    product = make_product(stock=5)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE naive_passes (product_id bigint, customer_id bigint)")
    looked = threading.Barrier(20)

    def naive_join(_i):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM naive_passes WHERE product_id = %s AND customer_id = %s", [product.pk, customer.pk]
            )
            exists = cursor.fetchone() is not None
            looked.wait(timeout=60)
            if not exists:
                cursor.execute("INSERT INTO naive_passes VALUES (%s, %s)", [product.pk, customer.pk])

    try:
        assert [o.error for o in run_concurrently(20, naive_join) if o.error] == []
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM naive_passes")
            assert cursor.fetchone()[0] == 20
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE naive_passes")


def storm(product, customers):
    """Every customer checks out one unit at once: the placed orders' customer ids, and the refusals' codes."""

    def buy(i):
        try:
            return place(customer=customers[i], items=[(product.pk, 1)]).customer_id
        except (AdmissionRequired, StockConflict) as exc:
            return exc.code

    outcomes = run_concurrently(len(customers), buy)
    assert [o.error for o in outcomes if o.error] == []
    return [o.value for o in outcomes]


def test_no_checkout_of_a_queued_product_without_an_admission(make_product):
    product = make_product(stock=40)
    queue_product(product, starts_in=60)
    customers = make_customers(40, "storm")
    for customer in customers[:20]:
        services.queue_join(customer=customer, product_id=product.pk)
    sale_starts_in(product, -1)
    admit_now(product)

    results = storm(product, customers)

    admitted = {c.pk for c in customers[:20]}
    assert sorted(r for r in results if isinstance(r, int)) == sorted(admitted)
    assert [r for r in results if not isinstance(r, int)] == ["admission_required"] * 20
    assert Order.objects.count() == 20
    assert_invariants()


def test_control_without_the_admission_check_the_unadmitted_buy(make_product, monkeypatch):
    monkeypatch.setattr(admission, "admission_use", lambda **kwargs: None)
    product = make_product(stock=40)
    queue_product(product, starts_in=-1)
    customers = make_customers(40, "nocheck")

    results = storm(product, customers)

    assert sum(isinstance(r, int) for r in results) == 40  # nobody was admitted, everyone bought


def test_admissions_never_exceed_the_pace_even_with_eight_sweepers(make_product):
    product = make_product(stock=10_000)
    queue_product(product, pace=5, starts_in=600)
    for customer in make_customers(300, "pace"):
        services.queue_join(customer=customer, product_id=product.pk)
    sale_starts_in(product, -3600)  # opened an hour ago, and the queue's credit clock starts now
    reset_queue_clock(product)
    started = db_now()  # the real time the test takes earns admissions too: it is added to the bound below
    earned_seconds = 0.0
    admitted = services.queue_advance(product_id=product.pk).admitted
    assert admitted <= 1  # the microseconds since the opening
    for seconds in (0.1, 0.5, 1.0, 1.9, 0.3, 2.0, 1.0):
        rewind_queue_clock(product, seconds)
        earned_seconds += seconds
        now = services.queue_advance(product_id=product.pk).admitted
        assert now <= 5 * 2, (seconds, now)  # one advance: at most QUEUE_MAX_BURST_SECONDS (2) of pace
        admitted += now
        real = (db_now() - started).total_seconds()
        assert admitted <= 5 * (earned_seconds + real) + 1, (earned_seconds, real, admitted)
    # Eight sweepers advance the same queue at the same instant, two seconds' worth earned: ten admissions at most.
    rewind_queue_clock(product, 2.0)
    earned_seconds += 2.0
    outcomes = run_concurrently(8, lambda i: services.queue_advance(product_id=product.pk).admitted)
    assert [o.error for o in outcomes if o.error] == []
    admitted += sum(o.value for o in outcomes)
    real = (db_now() - started).total_seconds()
    assert admitted <= 5 * (earned_seconds + real) + 1, (earned_seconds, real, admitted)
    assert admitted >= 5 * earned_seconds - 2  # and the pace is kept, not just bounded
    assert admitted_positions(product) == list(range(1, admitted + 1))
    assert_invariants()


def test_control_without_the_pace_everyone_is_admitted_at_once(make_product, monkeypatch):
    monkeypatch.setattr(services, "earned_credit", lambda **kwargs: 10.0**9)
    product = make_product(stock=10_000)
    queue_product(product, pace=5, starts_in=600)
    for customer in make_customers(300, "nopace"):
        services.queue_join(customer=customer, product_id=product.pk)
    sale_starts_in(product, -3600)
    reset_queue_clock(product)
    rewind_queue_clock(product, 1.0)
    assert services.queue_advance(product_id=product.pk).admitted == 300  # 60 times the pace


def returned_unit_scenario(make_product, prefix):
    """Stock 3, 10 waiting: three admitted, three buy, one order's payment window closes and the sweeper loop (the
    real command, in a thread) expires it. Returns the positions admitted once the loop has run."""
    product = make_product(stock=3)
    queue_product(product, pace=100, starts_in=600)
    customers = make_customers(10, prefix)
    for customer in customers:
        services.queue_join(customer=customer, product_id=product.pk)
    sale_starts_in(product, -1)
    admit_now(product)
    assert admitted_positions(product) == [1, 2, 3]
    buyers = sorted(QueuePass.objects.filter(product=product, position__lte=3), key=lambda p: p.position)
    orders = [place(customer=User.objects.get(pk=p.customer_id), items=[(product.pk, 1)]) for p in buyers]
    fourth = QueuePass.objects.get(product=product, position=4)
    assert pass_get(customer_id=fourth.customer_id, pass_id=fourth.pk).units_may_return is True
    make_overdue(Order.objects.get(pk=orders[0].order_id))
    rewind_queue_clock(product, 1.0)
    stop = threading.Event()

    def loop():
        try:
            call_command("expire_reservations", loop=True, interval=0.05, verbosity=0, stop_event=stop)
        finally:
            connections.close_all()

    thread = threading.Thread(target=loop, name="sweeper")
    thread.start()
    try:
        wait_until(
            lambda: _advanced_after_cancel(product, orders[0].order_id),
            what="the sweeper loop to expire the order and advance the queue",
        )
    finally:
        stop.set()
        thread.join(60)
    return product, admitted_positions(product)


def _advanced_after_cancel(product, order_id):
    """The order is cancelled and an advance has run since (the queue's credit clock is past the cancel)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT o.status = 'cancelled' AND q.credited_at > o.updated_at FROM orders o, product_queues q "
            "WHERE o.id = %s AND q.product_id = %s",
            [order_id, product.pk],
        )
        return cursor.fetchone()[0]


def test_a_returned_unit_admits_the_next_waiting_buyer_through_the_sweeper_loop(make_product):
    _product, admitted = returned_unit_scenario(make_product, "returned")
    assert admitted == [1, 2, 3, 4]  # the next in line, and only them
    assert_invariants()


def test_control_a_quota_fixed_at_the_opening_never_admits_the_next(make_product, monkeypatch):
    # The naive cap: admissions counted against the units there were at the opening (3), not against what is
    # available now.
    monkeypatch.setattr(
        services,
        "ADMISSION_CAP_SQL",
        "SELECT 3, (SELECT count(*) FROM queue_passes WHERE product_id = %(product_id)s AND admitted_at IS NOT NULL)",
    )
    _product, admitted = returned_unit_scenario(make_product, "quota")
    assert admitted == [1, 2, 3]


def test_sold_out_ends_the_queue(make_product):
    product = make_product(stock=2)
    queue_product(product, starts_in=600)
    customers = make_customers(30, "soldout")
    for customer in customers:
        services.queue_join(customer=customer, product_id=product.pk)
    sale_starts_in(product, -1)
    admit_now(product)
    winners = QueuePass.objects.filter(product=product, admitted_at__isnull=False)
    for queue_pass in winners:
        order = place(customer=User.objects.get(pk=queue_pass.customer_id), items=[(product.pk, 1)])
        payment_services.payment_event_apply(  # paid: its unit can never come back
            event_id=f"evt-queue-{order.order_id}",
            event_type=payment_services.EVENT_SUCCEEDED,
            order_id=order.order_id,
            amount=order.total,
            currency=order.currency,
        )
    states = {pass_get(customer_id=c.pk, product_id=product.pk).state for c in customers}
    assert states == {"used", "sold_out"}
    with pytest.raises(QueueSoldOut):
        services.queue_join(customer=make_customers(1, "toolate")[0], product_id=product.pk)
    assert_invariants()


def join_racing_a_removal(product, customer):
    """A join whose pass is written (its batch's INSERT done, not committed yet) while ops remove the queue: the
    batch is held after its INSERT until the removal has either finished or is waiting for a lock. Returns how the
    join ended (the exception's name, or "joined") and the passes of the product once both are done."""
    written, proceed = threading.Event(), threading.Event()
    outcome = []

    def hold_after_insert(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql == joins.RECORD_SQL:
            written.set()
            proceed.wait(timeout=60)
        return result

    def join():
        try:
            with connection.execute_wrapper(hold_after_insert):
                services.queue_join(customer=customer, product_id=product.pk)
            outcome.append("joined")
        except Exception as exc:  # the outcome is the test's subject
            outcome.append(type(exc).__name__)
        finally:
            connection.close()

    removed = threading.Event()

    def remove():
        try:
            services.queue_remove(product_id=product.pk)
            removed.set()
        finally:
            connection.close()

    joiner = threading.Thread(target=join)
    joiner.start()
    assert written.wait(timeout=60)
    remover = threading.Thread(target=remove)
    remover.start()
    wait_until(
        lambda: removed.is_set() or backends("wait_event_type = 'Lock' AND wait_event = 'advisory'"),
        what="the removal done, or waiting for the join",
    )
    proceed.set()
    joiner.join(timeout=60)
    remover.join(timeout=60)
    return outcome, QueuePass.objects.filter(product=product).count()


def test_removing_a_queue_is_one_transaction_a_join_cannot_interleave_with(make_product, customer):
    product = make_product(stock=5)
    queue_product(product, starts_in=60)

    # the join ran entirely before the removal: it answered its pass, and the pass went with the queue
    assert join_racing_a_removal(product, customer) == (["joined"], 0)
    assert not ProductQueue.objects.filter(product=product).exists()


def test_control_without_the_joins_shared_lock_a_removal_breaks_a_join_under_way(make_product, customer, monkeypatch):
    monkeypatch.setattr(joins, "JOIN_LOCK_SQL", "SELECT %(keys)s")
    product = make_product(stock=5)
    queue_product(product, starts_in=60)

    # the removal ran between the batch's insert and its commit: a pass outlives its queue (it would be placed in the
    # product's next queue)
    assert join_racing_a_removal(product, customer) == (["joined"], 1)
    assert not ProductQueue.objects.filter(product=product).exists()
