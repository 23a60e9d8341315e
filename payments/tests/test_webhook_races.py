"""Payment events under real concurrency: redeliveries, the deadline against the sweeper, the customer's cancel
against the payment, and a naive handler (test code only) that shows what the insert-first claim prevents."""

import json
import threading

import pytest
from django.db import connection, transaction
from django.test import Client
from rest_framework.test import APIClient

from checkout.testing import RACE_CASES, place_order
from devtools.testing import assert_invariants, run_concurrently, wait_for_lock_waiters
from inventory import reserve as inventory_reserve
from inventory.models import Inventory, StockMovement
from orders import services as order_services
from orders.models import Order, Reservation
from payments import services
from payments.models import PaymentAttempt, ProcessedEvent
from payments.tests.test_webhook import SECRET, deliver, event

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=RACE_CASES)
def inventory_strategy(request):
    """Every payment/sweeper race runs with products of each inventory strategy."""
    return request.param


@pytest.fixture(autouse=True)
def webhook_settings(settings):
    settings.PAYMENT_WEBHOOK_SECRET = SECRET
    settings.PAYMENT_WEBHOOK_TOLERANCE_SECONDS = 300


def stock(product):
    return Inventory.objects.values_list("available_stock", "reserved_stock").get(product=product)


def consumed_units(product):
    return sum(Reservation.objects.filter(product=product, status="consumed").values_list("qty", flat=True), start=0)


def assert_units_conserved(initial):
    """Per product: every unit is on sale, held by a pending order, or sold - never lost, never doubled."""
    for product, units in initial.items():
        available, reserved = stock(product)
        assert available + reserved + consumed_units(product) == units, product


def ledger(order, reason):
    return sorted(
        StockMovement.objects.filter(order_id=order.pk, reason=reason).values_list(
            "product_id", "available_delta", "reserved_delta"
        )
    )


def lines_of(order):
    return sorted(order.lines.values_list("product_id", "qty"))


# --------------------------------------------------------------------------------------------------------------
# The same event delivered 50 times at once


def test_fifty_concurrent_deliveries_of_one_event_apply_once(make_product, customer):
    products = [make_product(stock=10, price="5.00"), make_product(stock=10, price="7.00")]
    order = place_order(customer=customer, items=[(products[0].pk, 2), (products[1].pk, 3)])
    other = place_order(customer=customer, items=[(products[0].pk, 1)])  # its units must stay reserved
    body = json.dumps(event(order, event_id="evt-storm", reference="ch_storm")).encode()

    outcomes = run_concurrently(50, lambda i: deliver(body))

    assert [o.error for o in outcomes if o.error] == []
    assert {o.value.status_code for o in outcomes} == {200}
    statuses = sorted(o.value.json()["status"] for o in outcomes)
    assert statuses == ["duplicate"] * 49 + ["paid"]
    assert ProcessedEvent.objects.count() == 1
    assert ProcessedEvent.objects.get().outcome == "paid"
    assert stock(products[0]) == (7, 1)  # 2 consumed, the other order's 1 still reserved
    assert stock(products[1]) == (7, 0)
    assert ledger(order, "consume") == [(products[0].pk, 0, -2), (products[1].pk, 0, -3)]
    assert Order.objects.get(pk=order.pk).status == "paid"
    assert Order.objects.get(pk=other.pk).status == "pending_payment"
    assert list(PaymentAttempt.objects.filter(order=order).values_list("status", flat=True)) == ["succeeded"]
    assert_units_conserved({products[0]: 10, products[1]: 10})
    assert_invariants()


def test_two_distinct_charges_at_once_pay_once_and_flag_the_other(make_product, customer, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # setup: one customer holds many pending orders
    product = make_product(stock=10, price="5.00")
    orders = [place_order(customer=customer, items=[(product.pk, 1)]) for _ in range(10)]

    def pay(i):
        order = orders[i // 2]
        return deliver(event(order, event_id=f"evt-{i}", reference=f"ch_{i}")).json()["status"]

    outcomes = run_concurrently(20, pay)

    assert [o.error for o in outcomes if o.error] == []
    for k, order in enumerate(orders):
        assert sorted([outcomes[2 * k].value, outcomes[2 * k + 1].value]) == ["paid", "refund_required"]
        assert Order.objects.get(pk=order.pk).status == "paid"
        assert sorted(PaymentAttempt.objects.filter(order=order).values_list("status", flat=True)) == [
            "refund_required",
            "succeeded",
        ]
        assert ledger(order, "consume") == [(product.pk, 0, -1)]
    assert stock(product) == (0, 0)
    assert_units_conserved({product: 10})
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# Payment at the deadline against the sweeper

DEADLINE_OFFSETS_MS = [-1000, -20, -5, 0, 5, 20, 50, 30000]


def set_deadline(order, offset_ms):
    """Test setup only: move the order's payment window (and its reservations') to the database clock plus
    ``offset_ms``; returns the new deadline."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE orders SET payment_expires_at = clock_timestamp() + make_interval(secs => %s) "
            "WHERE id = %s RETURNING payment_expires_at",
            [offset_ms / 1000, order.pk],
        )
        (deadline,) = cursor.fetchone()
        cursor.execute("UPDATE inventory_reservations SET expires_at = %s WHERE order_id = %s", [deadline, order.pk])
    return deadline


FIRST = ["payment", "sweeper", "free"]


class DeadlineRaceOrder:
    """Test-only hooks that decide who takes the order row first in a round: ``payment`` (it holds the row while
    the sweeper runs, so the sweeper must skip it and the payment decides by the deadline), ``sweeper`` (it has
    claimed the due order before the payment asks for the row), or ``free`` (a plain race)."""

    def __init__(self, monkeypatch):
        self.real_lock_order = services.lock_order
        self.real_lock_due = order_services.lock_due_orders
        monkeypatch.setattr(services, "lock_order", self.lock_order)
        monkeypatch.setattr(order_services, "lock_due_orders", self.lock_due_orders)
        self.start("free")

    def start(self, first):
        self.first = first
        self.locked, self.claimed, self.sweeper_done = threading.Event(), threading.Event(), threading.Event()

    def lock_order(self, **kwargs):  # the payment's lock
        if self.first == "sweeper":
            assert self.claimed.wait(timeout=60)
        order = self.real_lock_order(**kwargs)
        if self.first == "payment":
            self.locked.set()
            assert self.sweeper_done.wait(timeout=60)  # the sweeper ran while this row was held
        return order

    def lock_due_orders(self, **kwargs):  # the sweeper's claim
        rows = self.real_lock_due(**kwargs)
        if self.first == "sweeper":
            self.claimed.set()
            if rows:
                wait_for_lock_waiters(1)  # the payment now waits for the claimed row
        return rows

    def sweep(self):
        if self.first == "payment":
            assert self.locked.wait(timeout=60)
        try:
            return order_services.orders_expire_due(batch_size=10).orders
        finally:
            self.sweeper_done.set()


def test_payment_at_the_deadline_racing_the_sweeper(make_product, customer, monkeypatch, settings):
    """Every deadline offset is run with the payment first, the sweeper first and a free race, so both outcomes
    (and both ways of cancelling) happen on every run; a payment after the deadline is always caught."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # setup: one customer holds many pending orders
    products = [make_product(stock=200, price="2.00"), make_product(stock=200, price="3.00")]
    initial = dict.fromkeys(products, 200)
    rounds = len(DEADLINE_OFFSETS_MS) * len(FIRST) * 2
    hooks = DeadlineRaceOrder(monkeypatch)
    orders = [
        place_order(customer=customer, items=[(products[0].pk, 1 + i % 3), (products[1].pk, 2)]) for i in range(rounds)
    ]
    tally = {"paid": 0, "cancelled by the sweeper": 0, "cancelled by the late payment": 0}

    for i, order in enumerate(orders):
        offset_ms = DEADLINE_OFFSETS_MS[i % len(DEADLINE_OFFSETS_MS)]
        first = FIRST[(i // len(DEADLINE_OFFSETS_MS)) % len(FIRST)]
        hooks.start(first)
        deadline = set_deadline(order, offset_ms)

        def race(j, order=order, i=i):
            if j == 0:
                return services.payment_event_apply(
                    event_id=f"evt-{i}",
                    event_type=services.EVENT_SUCCEEDED,
                    order_id=order.pk,
                    amount=order.total,
                    currency=order.currency,
                    provider_reference=f"ch_{i}",
                )
            return hooks.sweep()

        payment, sweeper = run_concurrently(2, race)

        assert payment.error is None and sweeper.error is None, (payment.error, sweeper.error)
        order.refresh_from_db()
        lines = lines_of(order)
        statuses = set(order.reservations.values_list("status", flat=True))
        attempt = PaymentAttempt.objects.get(order=order)
        processed = ProcessedEvent.objects.get(event_id=f"evt-{i}")
        assert processed.outcome == payment.value
        if order.status == "paid":
            assert (payment.value, sweeper.value) == ("paid", 0)
            assert statuses == {"consumed"}
            assert attempt.status == "succeeded"
            assert ledger(order, "consume") == [(pid, 0, -qty) for pid, qty in lines]
            assert ledger(order, "expire") == []
            assert offset_ms > -1000  # a window closed a second ago never takes a payment
            tally["paid"] += 1
            outcome = "paid"
        else:
            assert (order.status, order.cancel_reason) == ("cancelled", "payment_timeout")
            assert payment.value == "refund_required"
            assert sweeper.value in (0, 1)
            assert statuses == {"expired"}
            assert attempt.status == "refund_required"
            assert attempt.received_amount == order.total
            assert ledger(order, "expire") == [(pid, qty, -qty) for pid, qty in lines]  # released exactly once
            assert ledger(order, "consume") == []
            assert offset_ms < 30000  # a window open for another 30 s is never closed
            # Whoever expired it did so by a database clock at or past the deadline. (Django's Now() is the
            # statement time, never earlier than the transaction time that the decision was made by.)
            assert order.updated_at >= deadline
            assert processed.processed_at >= deadline or sweeper.value == 1
            outcome = "cancelled by the sweeper" if sweeper.value else "cancelled by the late payment"
            tally[outcome] += 1
        # The clear cases end the same way every time, whoever goes first.
        if offset_ms == 30000:
            assert outcome == "paid"
        elif offset_ms == -1000 and first == "payment":
            assert (outcome, sweeper.value) == ("cancelled by the late payment", 0)  # skipped, not waited for
        elif offset_ms == -1000 and first == "sweeper":
            assert outcome == "cancelled by the sweeper"

    print(f"\npayment vs sweeper at the deadline over {rounds} rounds: {tally}")
    assert all(tally.values()), tally  # all three outcomes happened
    # The -1 s rounds can only end cancelled and the +30 s rounds only paid: both outcomes were exercised.
    assert tally["paid"] >= rounds // len(DEADLINE_OFFSETS_MS)
    assert tally["cancelled by the sweeper"] + tally["cancelled by the late payment"] >= rounds // len(
        DEADLINE_OFFSETS_MS
    )
    assert sum(tally.values()) == rounds
    assert_units_conserved(initial)
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# The customer's cancel against the payment


class LockFirst:
    """Test-only hooks around the order lock of the cancel and of the payment: for an order planned ``cancel`` or
    ``payment``, the other side asks for the row only once the planned winner holds it; unplanned orders race
    freely."""

    def __init__(self, monkeypatch, plan):
        self.plan = plan
        self.held = {order_id: threading.Event() for order_id in plan}
        real_cancel_lock, real_payment_lock = order_services.lock_order, services.lock_order
        monkeypatch.setattr(order_services, "lock_order", lambda **kw: self.lock("cancel", real_cancel_lock, **kw))
        monkeypatch.setattr(services, "lock_order", lambda **kw: self.lock("payment", real_payment_lock, **kw))

    def lock(self, side, real, **kwargs):
        winner = self.plan.get(kwargs["order_id"])
        if winner is not None and winner != side:
            assert self.held[kwargs["order_id"]].wait(timeout=60)
        order = real(**kwargs)
        if winner == side:
            self.held[kwargs["order_id"]].set()
        return order


def test_customer_cancel_racing_payment(make_product, make_customer, monkeypatch):
    products = [make_product(stock=100, price="9.00"), make_product(stock=100, price="1.50")]
    initial = dict.fromkeys(products, 100)
    customers = [make_customer() for _ in range(30)]
    orders = [
        place_order(customer=customers[i], items=[(products[0].pk, 1), (products[1].pk, 1 + i % 4)]) for i in range(30)
    ]
    # A third of the orders with the cancel first, a third with the payment first, a third racing freely: both
    # outcomes happen on every run.
    plan = {order.pk: ["cancel", "payment"][k % 3] for k, order in enumerate(orders) if k % 3 < 2}
    LockFirst(monkeypatch, plan)

    def act(i):
        order = orders[i // 2]
        if i % 2 == 0:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {customers[i // 2].api_token}")
            response = client.post(f"/v1/orders/{order.pk}/cancel")
        else:
            response = deliver(event(order, event_id=f"evt-{order.pk}"), client=Client())
        return response.status_code, response.json()

    outcomes = run_concurrently(60, act)

    assert [o.error for o in outcomes if o.error] == []
    won = {"cancel": 0, "payment": 0}
    for k, order in enumerate(orders):
        (cancel_status, cancel_body), (pay_status, pay_body) = outcomes[2 * k].value, outcomes[2 * k + 1].value
        assert pay_status == 200
        order.refresh_from_db()
        lines = lines_of(order)
        statuses = set(order.reservations.values_list("status", flat=True))
        attempt = PaymentAttempt.objects.get(order=order)
        if cancel_status == 200:
            # The cancel won; the money that arrived after it is flagged for a refund, nothing is re-reserved.
            assert cancel_body["status"] == "cancelled"
            assert pay_body["status"] == "refund_required"
            assert (order.status, order.cancel_reason) == ("cancelled", "customer_cancelled")
            assert statuses == {"cancelled"}
            assert attempt.status == "refund_required"
            assert ledger(order, "cancel") == [(pid, qty, -qty) for pid, qty in lines]
            assert ledger(order, "consume") == []
            assert plan.get(order.pk, "cancel") == "cancel"
            won["cancel"] += 1
        else:
            # The payment won; the cancel is told honestly that the order is no longer pending.
            assert (cancel_status, cancel_body["code"]) == (409, "order_not_pending")
            assert pay_body["status"] == "paid"
            assert order.status == "paid"
            assert statuses == {"consumed"}
            assert attempt.status == "succeeded"
            assert ledger(order, "consume") == [(pid, 0, -qty) for pid, qty in lines]
            assert ledger(order, "cancel") == []
            assert plan.get(order.pk, "payment") == "payment"
            won["payment"] += 1
    print(f"\ncancel vs payment: {won}")
    assert sum(won.values()) == 30
    assert won["cancel"] >= 10 and won["payment"] >= 10, won  # both outcomes happened
    assert_units_conserved(initial)
    assert_invariants()


# --------------------------------------------------------------------------------------------------------------
# Control: a naive handler that checks with SELECT instead of claiming the event id first


def naive_payment_apply(*, event_id, order_id, checked):
    """The bug the insert-first claim prevents: look the event up, and if it is new, apply it. ``checked`` (a
    barrier) makes every delivery finish its check before any applies: the race, made certain."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM processed_events WHERE event_id = %s", [event_id])
        seen = cursor.fetchone() is not None
    checked.wait(timeout=60)
    if seen:
        return "duplicate"
    with transaction.atomic():
        # Trusting the check, the handler applies the payment: the order's reservations are consumed.
        reservations = list(Reservation.objects.filter(order_id=order_id).order_by("product_id"))
        inventory_reserve.stock_consume(
            lines=[inventory_reserve.ReservedUnits(r.order_id, r.product_id, r.bucket, r.qty) for r in reservations]
        )
        Reservation.objects.filter(order_id=order_id).update(status="consumed")
        Order.objects.filter(pk=order_id).update(status="paid")
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO processed_events (event_id, outcome) VALUES (%s, 'paid') ON CONFLICT DO NOTHING",
                [event_id],
            )
    return "paid"


def test_control_naive_select_then_apply_double_consumes(make_product, customer):
    """Same assertions as the 50-delivery test, against the naive handler: they fail. (On a one-row product: the
    arithmetic below counts one row's units; on a bucketed product the double consume hits the bucket guard.)"""
    product = make_product(stock=40, price="5.00", strategy="guarded_update")
    order = place_order(customer=customer, items=[(product.pk, 2)])
    place_order(customer=customer, items=[(product.pk, 20)])  # someone else's reserved units
    deliveries = 5
    checked = threading.Barrier(deliveries)

    outcomes = run_concurrently(
        deliveries, lambda i: naive_payment_apply(event_id="evt-naive", order_id=order.pk, checked=checked)
    )

    assert [o.error for o in outcomes if o.error] == []
    statuses = [o.value for o in outcomes]
    assert ProcessedEvent.objects.count() == 1  # the log looks fine...
    # ...but exactly-once is broken: no delivery was recognised as a duplicate, and all of them consumed.
    assert statuses.count("duplicate") == 0
    assert statuses.count("paid") == deliveries
    assert len(ledger(order, "consume")) == deliveries
    assert stock(product) == (18, 22 - 2 * deliveries)  # 8 units of the other order's reservation vanished
    with pytest.raises(AssertionError, match="reserved_vs_active_reservations"):
        assert_invariants()
