"""Per-customer purchase limits (``products.max_per_customer``) and the cap on open pending orders
(``MAX_PENDING_ORDERS_PER_CUSTOMER``): both enforced under the customer's checkout lock (step 3 of ``skincare.locks``)."""

import threading

import pytest

from checkout import services as checkouts
from checkout.testing import place_order
from checkout.tests.test_checkout_http_race import post_checkout_once
from devtools.testing import assert_invariants, make_overdue, run_concurrently
from inventory.exceptions import StockConflict
from inventory.models import Inventory
from orders import services as order_services
from orders.exceptions import PurchaseLimitExceeded, TooManyPendingOrders
from orders.models import Order, Reservation


def buy(api, product, qty=1):
    return api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": qty}]}, format="json")


@pytest.mark.django_db
def test_limit_counts_pending_and_paid_units_and_names_the_products(api, make_product):
    limited = make_product(stock=50, max_per_customer=2)
    other = make_product(stock=50, max_per_customer=1)
    free = make_product(stock=50)

    first = buy(api, limited)
    order_services.order_mark_paid(order=Order.objects.get(pk=first.json()["order_id"]))  # paid units count too
    second = buy(api, limited)
    third = api.post(
        "/v1/checkout",
        {"items": [{"product_id": limited.pk, "qty": 1}, {"product_id": other.pk, "qty": 2}]},
        format="json",
    )
    after_pending = buy(api, limited)

    assert (first.status_code, second.status_code) == (201, 201)
    assert third.status_code == 409
    assert third.json()["code"] == "purchase_limit_exceeded"
    assert third.json()["product_ids"] == [other.pk]  # more than the limit in one request
    assert after_pending.status_code == 409
    assert after_pending.json()["product_ids"] == [limited.pk]
    assert buy(api, free, qty=5).status_code == 201
    assert Inventory.objects.get(product=limited).reserved_stock == 1  # the paid one left the counters
    assert_invariants()


@pytest.mark.django_db
def test_cancelled_and_expired_orders_give_their_units_back_to_the_limit(api, make_product):
    limited = make_product(stock=50, max_per_customer=1)
    first = buy(api, limited)
    assert api.post(f"/v1/orders/{first.json()['order_id']}/cancel").status_code == 200
    second = buy(api, limited)
    assert second.status_code == 201
    make_overdue(Order.objects.get(pk=second.json()["order_id"]))  # payment window closed, sweeper not run yet
    assert buy(api, limited).status_code == 201


@pytest.mark.django_db
def test_other_customers_are_not_affected_by_a_limit(make_product, make_customer):
    limited = make_product(stock=50, max_per_customer=1)
    alice, bob = make_customer(), make_customer()
    place_order(customer=alice, items=[(limited.pk, 1)])
    with pytest.raises(PurchaseLimitExceeded):
        place_order(customer=alice, items=[(limited.pk, 1)])
    place_order(customer=bob, items=[(limited.pk, 1)])


def checkout_outcome(customer, items):
    try:
        place_order(customer=customer, items=items)
        return "created"
    except PurchaseLimitExceeded:
        return "limit"
    except TooManyPendingOrders:
        return "pending_cap"
    except StockConflict:
        return "conflict"


@pytest.mark.django_db(transaction=True)
def test_thirty_concurrent_checkouts_by_one_customer_never_pass_the_limit(make_product, make_customer):
    limited = make_product(stock=100, max_per_customer=2)
    greedy, others = make_customer(), [make_customer() for _ in range(5)]

    def work(i):
        if i < 30:
            return checkout_outcome(greedy, [(limited.pk, 1)])
        return checkout_outcome(others[i - 30], [(limited.pk, 2)])

    outcomes = run_concurrently(35, work)

    assert [o.error for o in outcomes if o.error] == []
    greedy_results = [o.value for o in outcomes[:30]]
    assert greedy_results.count("created") == 2
    assert greedy_results.count("limit") == 28
    assert [o.value for o in outcomes[30:]] == ["created"] * 5  # other customers unaffected
    held = Reservation.objects.filter(order__customer=greedy, product=limited, status="active")
    assert sum(held.values_list("qty", flat=True)) == 2
    assert Inventory.objects.get(product=limited).reserved_stock == 2 + 5 * 2
    assert_invariants()


def without_the_customer_lock(monkeypatch, parties):
    """TEST ONLY: the naive version: no customer lock, and every checkout reads the customer's orders before any
    commits (a barrier right before the stock update makes the race certain)."""
    unlocked = checkouts.QUOTES_SQL.replace("(SELECT 1 FROM pg_advisory_xact_lock(%(customer_lock)s))", "1")
    assert unlocked != checkouts.QUOTES_SQL
    monkeypatch.setattr(checkouts, "QUOTES_SQL", unlocked)
    all_checked = threading.Barrier(parties)
    real = checkouts.order_stock_reserve

    def reserve_after_everyone_checked(state):
        all_checked.wait(timeout=60)
        return real(state)

    monkeypatch.setattr(checkouts, "order_stock_reserve", reserve_after_everyone_checked)


@pytest.mark.django_db(transaction=True)
def test_control_without_the_customer_lock_the_limit_is_exceeded(make_product, customer, monkeypatch):
    limited = make_product(stock=100, max_per_customer=2)
    without_the_customer_lock(monkeypatch, 30)

    outcomes = run_concurrently(30, lambda i: checkout_outcome(customer, [(limited.pk, 1)]))

    assert [o.error for o in outcomes if o.error] == []
    assert [o.value for o in outcomes].count("created") > 2  # the limit of 2 did not hold
    assert Inventory.objects.get(product=limited).reserved_stock > 2


@pytest.mark.django_db
def test_pending_order_cap(api, make_product, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 5
    product, sold_out = make_product(stock=50), make_product(stock=0)

    made = [buy(api, product).status_code for _ in range(5)]
    sixth = buy(api, product)
    sold_out_answer = buy(api, sold_out)

    assert made == [201] * 5
    assert sixth.status_code == 409
    assert sixth.json()["code"] == "too_many_pending_orders"
    assert sold_out_answer.json()["code"] == "stock_conflict"  # sold out is still reported as sold out
    make_overdue(Order.objects.order_by("id").first())  # a closed payment window frees a slot
    assert buy(api, product).status_code == 201
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_pending_cap_holds_under_concurrency(make_product, customer, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 5
    product = make_product(stock=100)

    outcomes = run_concurrently(20, lambda i: checkout_outcome(customer, [(product.pk, 1)]))

    assert [o.error for o in outcomes if o.error] == []
    assert sorted(o.value for o in outcomes) == ["created"] * 5 + ["pending_cap"] * 15
    assert Order.objects.filter(customer=customer, status="pending_payment").count() == 5
    assert_invariants()


@pytest.mark.django_db(transaction=True)
def test_control_without_the_customer_lock_the_pending_cap_is_exceeded(make_product, customer, settings, monkeypatch):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 5
    product = make_product(stock=100)
    without_the_customer_lock(monkeypatch, 20)

    outcomes = run_concurrently(20, lambda i: checkout_outcome(customer, [(product.pk, 1)]))

    assert [o.error for o in outcomes if o.error] == []
    assert Order.objects.filter(customer=customer, status="pending_payment").count() > 5


def post_checkout(base_url, token, items):
    """One HTTP checkout, no client retry: (status, body)."""
    status, body, _retry_after = post_checkout_once(base_url, token, items)
    return status, body


@pytest.mark.django_db(transaction=True)
def test_seed_proof_one_token_hundred_concurrent_checkouts_one_201_rest_stock_conflict(
    live_server, make_product, customer, settings
):
    """The seeds' proof with the default limits: ONE customer token, 100 checkouts at once, stock 1."""
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 5  # the default, stated
    settings.CHECKOUT_RATE_LIMIT = ""  # the default: off
    product = make_product(stock=1)

    outcomes = run_concurrently(
        100, lambda i: post_checkout(live_server.url, customer.api_token, [{"product_id": product.pk, "qty": 1}])
    )

    assert [o.error for o in outcomes if o.error] == []
    statuses = [o.value[0] for o in outcomes]
    assert (statuses.count(201), statuses.count(409)) == (1, 99)
    assert {o.value[1]["code"] for o in outcomes if o.value[0] == 409} == {"stock_conflict"}
    assert Order.objects.count() == 1
    assert_invariants()
