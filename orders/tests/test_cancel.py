"""Customer cancel: ``POST /v1/orders/{id}/cancel`` and its race with the sweeper."""

import threading

import pytest
from rest_framework.test import APIClient

from checkout.testing import place_order
from devtools.testing import assert_invariants, make_overdue, run_concurrently
from inventory.models import Inventory, StockMovement
from orders import services as order_services
from orders.exceptions import OrderNotPending
from orders.models import Order, Reservation
from payments import services
from payments.models import PaymentAttempt


def cancel_url(order_id):
    return f"/v1/orders/{order_id}/cancel"


def state():
    return {
        "orders": list(Order.objects.order_by("id").values_list("id", "status", "cancel_reason")),
        "reservations": list(Reservation.objects.order_by("id").values_list("id", "status")),
        "inventories": list(
            Inventory.objects.order_by("product_id").values_list("product_id", "available_stock", "reserved_stock")
        ),
        "ledger": StockMovement.objects.count(),
        "attempts": list(PaymentAttempt.objects.order_by("id").values_list("id", "status")),
    }


@pytest.fixture
def products(make_product):
    return [make_product(stock=10, price="4.00"), make_product(stock=10, price="6.00")]


@pytest.fixture
def order(api, products):
    return place_order(customer=api.customer, items=[(products[1].pk, 1), (products[0].pk, 3)])


@pytest.mark.django_db
def test_cancel_returns_units_and_writes_cancel_ledger_rows(api, order, products):
    response = api.post(cancel_url(order.pk))

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["order_id"], body["status"], body["cancel_reason"]) == (order.pk, "cancelled", "customer_cancelled")
    assert body["payment_url"] is None
    assert body["items"] == [
        {"product_id": products[0].pk, "qty": 3, "unit_price": "4.00"},
        {"product_id": products[1].pk, "qty": 1, "unit_price": "6.00"},
    ]
    assert set(order.reservations.values_list("status", flat=True)) == {"cancelled"}
    for product in products:
        inventory = Inventory.objects.get(product=product)
        assert (inventory.available_stock, inventory.reserved_stock) == (10, 0)
    assert sorted(
        StockMovement.objects.filter(order_id=order.pk, reason="cancel").values_list(
            "product_id", "available_delta", "reserved_delta"
        )
    ) == [(products[0].pk, 3, -3), (products[1].pk, 1, -1)]
    assert PaymentAttempt.objects.get(order=order).status == "pending"
    assert_invariants()


@pytest.mark.django_db
def test_cancel_twice_is_409_and_changes_nothing(api, order):
    api.post(cancel_url(order.pk))
    before = state()

    response = api.post(cancel_url(order.pk))

    assert response.status_code == 409
    assert response.json()["code"] == "order_not_pending"
    assert response.json()["error"]
    assert state() == before


@pytest.mark.django_db
def test_cancel_of_paid_order_is_409_and_changes_nothing(api, order):
    services.payment_event_apply(
        event_id="evt-paid",
        event_type=services.EVENT_SUCCEEDED,
        order_id=order.pk,
        amount=order.total,
        currency=order.currency,
    )
    before = state()

    response = api.post(cancel_url(order.pk))

    assert response.status_code == 409
    assert response.json()["code"] == "order_not_pending"
    assert state() == before
    assert Order.objects.get(pk=order.pk).status == "paid"
    assert_invariants()


@pytest.mark.django_db
def test_cancel_of_expired_order_is_409(api, order):
    make_overdue(order)
    assert order_services.orders_expire_due().orders == 1
    before = state()

    response = api.post(cancel_url(order.pk))

    assert response.status_code == 409
    assert state() == before
    assert Order.objects.get(pk=order.pk).cancel_reason == "payment_timeout"


@pytest.mark.django_db
def test_someone_elses_order_is_404_and_changes_nothing(order, make_customer):
    stranger = make_customer()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {stranger.api_token}")
    before = state()

    response = client.post(cancel_url(order.pk))
    missing = client.post(cancel_url(order.pk + 1000))

    assert response.status_code == 404
    assert response.json() == {"error": "Order not found.", "code": "order_not_found", "order_id": order.pk}
    # Someone else's order and no order at all look exactly alike.
    assert missing.status_code == 404
    assert missing.json() == {"error": "Order not found.", "code": "order_not_found", "order_id": order.pk + 1000}
    assert state() == before
    assert Order.objects.get(pk=order.pk).status == "pending_payment"


@pytest.mark.django_db
def test_cancel_needs_a_token(order):
    before = state()

    response = APIClient().post(cancel_url(order.pk))

    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    assert state() == before


# --------------------------------------------------------------------------------------------------------------
# Cancel racing the sweeper


class CancelOrSweeperFirst:
    """Test-only hooks: in a ``cancel`` round the sweeper starts only once the cancel holds the order row (it
    must skip it); in a ``sweeper`` round the cancel asks for the row only once the sweeper has claimed it; in a
    ``free`` round they race."""

    def __init__(self, monkeypatch):
        self.real_lock_order, self.real_lock_due = order_services.lock_order, order_services.lock_due_orders
        monkeypatch.setattr(order_services, "lock_order", self.lock_order)
        monkeypatch.setattr(order_services, "lock_due_orders", self.lock_due_orders)
        self.start("free")

    def start(self, first):
        self.first, self.cancel_holds, self.sweeper_claimed = first, threading.Event(), threading.Event()

    def lock_order(self, **kwargs):
        if self.first == "sweeper":
            assert self.sweeper_claimed.wait(timeout=60)
        order = self.real_lock_order(**kwargs)
        self.cancel_holds.set()
        return order

    def lock_due_orders(self, **kwargs):
        if self.first == "cancel":
            assert self.cancel_holds.wait(timeout=60)
        rows = self.real_lock_due(**kwargs)
        self.sweeper_claimed.set()
        return rows


@pytest.mark.django_db(transaction=True)
def test_cancel_racing_the_sweeper_releases_each_reservation_once(make_product, make_customer, monkeypatch):
    products = [make_product(stock=100) for _ in range(3)]
    customers = [make_customer() for _ in range(30)]
    orders = [
        place_order(customer=customers[i], items=[(products[i % 3].pk, 1 + i % 2), (products[(i + 1) % 3].pk, 2)])
        for i in range(30)
    ]

    def cancel(order, customer):
        try:
            return order_services.order_cancel(order_id=order.pk, customer=customer).cancel_reason
        except OrderNotPending:
            return "not_pending"

    hooks = CancelOrSweeperFirst(monkeypatch)
    plan = ["cancel", "sweeper", "free"]
    results = []
    for i, order in enumerate(orders):  # one round per order: its cancel and a sweeper batch, released together
        hooks.start(plan[i % 3])
        make_overdue(order)
        both = run_concurrently(
            2, lambda j, i=i, order=order: cancel(order, customers[i]) if j == 0 else order_services.orders_expire_due()
        )
        assert [o.error for o in both if o.error] == []
        results.append((both[0].value, both[1].value.orders))

    for i, (customer_result, swept) in enumerate(results):
        # Exactly one of the two closed the order; the other saw it closed.
        assert (customer_result, swept) in {("customer_cancelled", 0), ("not_pending", 1)}
        if plan[i % 3] != "free":
            assert (customer_result, swept) == {"cancel": ("customer_cancelled", 0), "sweeper": ("not_pending", 1)}[
                plan[i % 3]
            ]
    by_customer = sum(1 for r, _ in results if r == "customer_cancelled")
    print(f"\ncancel vs sweeper: {by_customer} cancelled by the customer, {30 - by_customer} by the sweeper")
    assert by_customer >= 10 and 30 - by_customer >= 10  # both outcomes happened
    for i, order in enumerate(orders):
        order.refresh_from_db()
        reasons = set(
            StockMovement.objects.filter(order_id=order.pk)
            .exclude(reason="reserve")
            .values_list("reason", "product_id", "available_delta", "reserved_delta")
        )
        lines = list(order.lines.values_list("product_id", "qty"))
        statuses = set(order.reservations.values_list("status", flat=True))
        if results[i][0] == "customer_cancelled":
            assert order.cancel_reason == "customer_cancelled"
            assert statuses == {"cancelled"}
            assert reasons == {("cancel", pid, qty, -qty) for pid, qty in lines}
        else:
            assert results[i][0] == "not_pending"  # the honest loser's answer, a 409 at the API
            assert order.cancel_reason == "payment_timeout"
            assert statuses == {"expired"}
            assert reasons == {("expire", pid, qty, -qty) for pid, qty in lines}
        assert order.status == "cancelled"
        assert StockMovement.objects.filter(order_id=order.pk).exclude(reason="reserve").count() == len(lines)
    for product in products:
        inventory = Inventory.objects.get(product=product)
        assert (inventory.available_stock, inventory.reserved_stock) == (100, 0)  # every unit back, once
    assert_invariants()
