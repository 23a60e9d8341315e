"""Cart races on committed data, real threads with their own connections released by a barrier.

* A cart becomes an order at most once: 50 concurrent checkouts of one cart give one 201 and 49 ``cart_checked_out``
  (or, under one Idempotency-Key, 49 replays). Control: read-then-checkout without the claim makes several orders.
* Creating and replacing carts stays off the hot row: both complete while another transaction holds the product's
  stock row (bucket 0). Control: a cart write that touches the row (a stock check with a lock) is stuck behind it.
"""

import threading

import pytest
from django.db import OperationalError, connection, transaction

from carts import services
from carts.exceptions import CartCheckedOut
from carts.models import Cart, CartItem
from checkout.idempotency import Placed
from checkout.services import Checkout, checkout_place, order_open, order_stock_reserve
from checkout.testing import STRATEGIES, place_cart
from devtools.testing import ThreadRun, assert_invariants, run_concurrently
from inventory.models import Inventory
from orders.models import Order
from orders.selectors import OrderView

pytestmark = pytest.mark.django_db(transaction=True)


def checkout(customer, cart_id, key=None):
    """One cart checkout: the OrderView (or, under a key, the Placed answer), or the CartCheckedOut refusal."""
    try:
        if key is None:
            return place_cart(customer=customer, cart_id=cart_id)
        answer = checkout_place(customer=customer, cart_id=cart_id, key=key, fingerprint=f"cart:{cart_id}")
    except CartCheckedOut as exc:
        return exc
    if answer.refusal is not None and answer.refusal.body["code"] == "cart_checked_out":
        return CartCheckedOut(cart_id=str(cart_id), order_id=answer.refusal.body["order_id"])
    return answer


def test_fifty_concurrent_checkouts_of_one_cart_make_exactly_one_order(make_product, customer):
    product = make_product(stock=100)
    cart = services.cart_create(customer=customer, items=[(product.pk, 2)])

    outcomes = run_concurrently(50, lambda i: checkout(customer, cart.cart_id))

    assert [o.error for o in outcomes if o.error] == []
    created = [o.value for o in outcomes if isinstance(o.value, OrderView)]
    refused = [o.value for o in outcomes if isinstance(o.value, CartCheckedOut)]
    assert (len(created), len(refused)) == (1, 49)
    order_id = created[0].order_id
    assert {exc.order_id for exc in refused} == {order_id}  # every loser is told which order it became
    assert list(Order.objects.values_list("pk", flat=True)) == [order_id]
    stored = Cart.objects.get(pk=cart.cart_id)
    assert (stored.status, stored.order_id) == ("checked_out", order_id)
    assert Inventory.objects.get(product=product).reserved_stock == 2
    assert_invariants()


def test_fifty_concurrent_checkouts_under_one_key_are_one_order_and_replays(make_product, customer):
    product = make_product(stock=100)
    cart = services.cart_create(customer=customer, items=[(product.pk, 1)])

    outcomes = run_concurrently(50, lambda i: checkout(customer, cart.cart_id, key="same-key"))

    assert [o.error for o in outcomes if o.error] == []
    results = [o.value for o in outcomes]
    first = [r for r in results if isinstance(r, Placed) and not r.replayed]
    assert len(first) == 1 and first[0].order is not None
    others = [r for r in results if r is not first[0]]
    # Each other request waited for the key and replays the first answer (or, equally safe, is told the cart is
    # checked out).
    assert all(
        (isinstance(r, Placed) and r.replayed and r.order == first[0].order) or isinstance(r, CartCheckedOut)
        for r in others
    )
    assert Order.objects.count() == 1
    assert_invariants()


def test_replaces_racing_checkouts_the_order_is_exactly_the_cart_it_claimed(make_product, customer):
    products = [make_product(stock=100) for _ in range(3)]
    cart = services.cart_create(customer=customer, items=[(products[0].pk, 1)])

    def act(i):
        if i % 2:
            return checkout(customer, cart.cart_id)
        try:
            return services.cart_replace(customer=customer, cart_id=cart.cart_id, items=[(products[i % 3].pk, i + 1)])
        except CartCheckedOut as exc:
            return exc

    outcomes = run_concurrently(30, act)

    assert [o.error for o in outcomes if o.error] == []
    created = [o.value for o in outcomes if isinstance(o.value, OrderView)]
    assert len(created) == 1
    order = Order.objects.get(pk=created[0].order_id)
    # No replace slipped in after the claim: the cart still holds exactly what became the order.
    cart_items = sorted(CartItem.objects.filter(cart_id=cart.cart_id).values_list("product_id", "qty"))
    assert sorted(order.lines.values_list("product_id", "qty")) == cart_items
    assert Cart.objects.get(pk=cart.cart_id).order_id == order.pk
    assert_invariants()


def naive_cart_checkout(customer, cart_id, read_done):
    """The bug the claim prevents: look at the cart, then check it out, then mark it. ``read_done`` (a barrier)
    makes every request read the open cart before any of them writes: the race, made certain."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM carts WHERE id = %s", [cart_id])
            (status,) = cursor.fetchone()
            cursor.execute("SELECT product_id, qty FROM cart_items WHERE cart_id = %s", [cart_id])
            items = cursor.fetchall()
        read_done.wait(timeout=60)
        if status != "open":
            return "checked_out"
        state = Checkout(customer=customer, quantities=dict(items), cart_id=None, memory_asked=False)
        order_open(state)
        order = order_stock_reserve(state)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE carts SET status = 'checked_out', order_id = %s WHERE id = %s", [order.order_id, cart_id]
            )
        return order


def test_control_read_then_checkout_without_the_claim_makes_several_orders(make_product, customer, settings):
    settings.MAX_PENDING_ORDERS_PER_CUSTOMER = 0  # let the race show itself, not the pending cap
    product = make_product(stock=100)
    cart = services.cart_create(customer=customer, items=[(product.pk, 1)])
    read_done = threading.Barrier(10)

    outcomes = run_concurrently(10, lambda i: naive_cart_checkout(customer, cart.cart_id, read_done))

    assert [o.error for o in outcomes if o.error] == []
    orders = [o.value for o in outcomes if isinstance(o.value, OrderView)]
    assert len(orders) == 10  # one cart, ten orders: what the conditional claim prevents
    assert Order.objects.count() == 10


class RowHolder:
    """Another transaction holding the product's stock row (bucket 0) ``FOR UPDATE`` (the strongest row lock) until
    released: what a long checkout of a hot product looks like to everyone else."""

    def __init__(self, product_id):
        self.held, self.release = threading.Event(), threading.Event()

        def hold():
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM stock_buckets WHERE bucket = 0 AND product_id = %s FOR UPDATE", [product_id]
                )
                self.held.set()
                self.release.wait(timeout=60)

        self.run = ThreadRun(hold, name="row-holder")
        assert self.held.wait(timeout=30)

    def finish(self):
        self.release.set()
        outcome = self.run.join()
        assert outcome.error is None, outcome.error


@pytest.fixture
def short_lock_timeout():
    """This test's connection gives up on any lock after 300 ms (instead of hanging on one)."""
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '300ms'")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET lock_timeout")


def test_creating_and_replacing_a_cart_take_no_inventory_lock(make_product, customer, short_lock_timeout):
    hot, other = make_product(stock=10), make_product(stock=10)
    cart = services.cart_create(customer=customer, items=[(other.pk, 1)])
    holder = RowHolder(hot.pk)
    try:
        created = services.cart_create(customer=customer, items=[(hot.pk, 3)])
        replaced = services.cart_replace(customer=customer, cart_id=cart.cart_id, items=[(hot.pk, 2)])
    finally:
        holder.finish()

    assert [(line.product_id, line.qty, line.available_stock) for line in created.lines] == [(hot.pk, 3, 10)]
    assert [(line.product_id, line.qty) for line in replaced.lines] == [(hot.pk, 2)]


def naive_cart_create(customer, product_id, qty):
    """A cart that "checks the stock properly" by locking the row it reads: it queues behind every checkout."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT available_stock FROM stock_buckets WHERE bucket = 0 AND product_id = %s FOR SHARE", [product_id]
        )
        return services.cart_create(customer=customer, items=[(product_id, qty)])


def test_control_a_cart_write_that_locks_the_stock_row_is_stuck_behind_a_checkout(
    make_product, customer, short_lock_timeout
):
    hot = make_product(stock=10)
    holder = RowHolder(hot.pk)
    try:
        with pytest.raises(OperationalError, match="lock timeout"):
            naive_cart_create(customer, hot.pk, 1)
    finally:
        holder.finish()
    assert not Cart.objects.exists()


def test_a_cart_row_held_too_long_is_503_busy_and_nothing_written(make_product, api, short_lock_timeout):
    product = make_product(stock=10)
    cart = services.cart_create(customer=api.customer, items=[(product.pk, 1)])
    held, release = threading.Event(), threading.Event()

    def hold():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM carts WHERE id = %s FOR UPDATE", [cart.cart_id])
            held.set()
            release.wait(timeout=60)

    holder = ThreadRun(hold, name="cart-holder")
    assert held.wait(timeout=30)
    try:
        checkout_answer = api.post(f"/v1/carts/{cart.cart_id}/checkout")
        replace_answer = api.put(
            f"/v1/carts/{cart.cart_id}", {"items": [{"product_id": product.pk, "qty": 2}]}, format="json"
        )
    finally:
        release.set()
        assert holder.join().error is None

    for response in (checkout_answer, replace_answer):
        assert (response.status_code, response.json()["code"]) == (503, "busy")
        assert response.headers["Retry-After"] == "1"
    assert Order.objects.count() == 0
    assert list(Cart.objects.values_list("status", flat=True)) == ["open"]
    assert list(CartItem.objects.values_list("qty", flat=True)) == [1]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_cart_checks_out_once_under_every_inventory_strategy(make_product, customer, strategy):
    """A serializable product makes the runner start the whole transaction over at SERIALIZABLE, the cart's claim
    included; every strategy ends with one order and the cart checked out."""
    product, other = make_product(stock=5, strategy=strategy), make_product(stock=5)
    cart = services.cart_create(customer=customer, items=[(product.pk, 2), (other.pk, 1)])

    order = place_cart(customer=customer, cart_id=cart.cart_id)
    again = checkout(customer, cart.cart_id)

    assert isinstance(order, OrderView)
    assert isinstance(again, CartCheckedOut) and again.order_id == order.order_id
    assert Inventory.objects.get(product=product).reserved_stock == 2
    assert Order.objects.count() == 1
    assert_invariants()
