"""Test helpers that drive a checkout the way a well-behaved client does, under every inventory strategy.

The race suite runs against each strategy of ``inventory.models.InventoryStrategy``. Strategies differ in how a
buyer can be turned away: ``row_lock_nowait`` answers ``409 lock_busy`` while another checkout holds the row,
``serializable`` answers ``503 busy`` when its retries ran out, ``optimistic`` answers ``409 stock_conflict`` with
``gave_up_after`` when its version check kept losing. The first two carry ``Retry-After`` and a client retries
them; so does ``buy_retrying`` here (at once: tests never sleep). Then every strategy must give the same answers:
exactly the stock is sold, every other buyer gets ``stock_conflict``.
"""

from django.conf import settings

from checkout.services import checkout_place
from inventory.exceptions import LockBusy, StockConflict
from inventory.models import InventoryStrategy
from orders.models import Order
from orders.selectors import OrderView
from skincare.errors import ServiceBusy
from skincare.validation import merge_quantities

STRATEGIES = list(InventoryStrategy.values)
# The race modules' cases: every strategy, and guarded_update spread over 8 stock buckets (conftest's make_product).
BUCKETED = "bucketed"
RACE_CASES = [*STRATEGIES, BUCKETED]


def place(*, customer, items) -> OrderView:
    """The checkout of ``items`` ((product_id, qty) pairs, merged as the view merges them), without a key: the order
    placed (a refusal raises)."""
    placed = checkout_place(customer=customer, quantities=merge_quantities(items, max_qty=settings.CHECKOUT_MAX_QTY))
    assert placed.order is not None  # without a key a refusal raises
    return placed.order


def place_cart(*, customer, cart_id) -> OrderView:
    """The checkout of the customer's cart ``cart_id``, without a key: the order placed (a refusal raises)."""
    placed = checkout_place(customer=customer, cart_id=cart_id)
    assert placed.order is not None  # without a key a refusal raises
    return placed.order


def place_order(*, customer, items):
    """Checkout, then the placed order as its model row (tests refresh it and follow its relations)."""
    return Order.objects.get(pk=place(customer=customer, items=items).order_id)


RETRYABLE = ("lock_busy", "busy")


def buy(customer, items):
    """One checkout attempt: the Order, or ``"conflict"``, ``"gave_up"``, ``"lock_busy"`` or ``"busy"``."""
    try:
        return place_order(customer=customer, items=items)
    except StockConflict as exc:
        return "gave_up" if exc.gave_up_after is not None else "conflict"
    except LockBusy:
        return "lock_busy"
    except ServiceBusy:
        return "busy"


def buy_retrying(customer, items, *, attempts=200, retry_gave_up=False, retry_busy=True):
    """Checkout as a client that honours ``Retry-After``: retry ``lock_busy`` and ``busy`` answers (bounded). With
    ``retry_gave_up`` also an optimistic give-up (a client that refreshes the cart, sees stock, and tries again).
    ``retry_busy=False`` turns a ``busy`` (lock timeout, retries exhausted) into ``ServiceBusy`` for the test."""
    retryable = set(RETRYABLE) | ({"gave_up"} if retry_gave_up else set())
    if not retry_busy:
        retryable.discard("busy")
    for _ in range(attempts):
        outcome = buy(customer, items)
        if outcome == "busy" and not retry_busy:
            raise ServiceBusy()
        if not (isinstance(outcome, str) and outcome in retryable):
            return outcome
    raise AssertionError(f"still {outcome} after {attempts} attempts")


def is_order(value) -> bool:
    return isinstance(value, Order)
