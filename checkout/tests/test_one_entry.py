"""One checkout entry, ``checkout.services.checkout_place``, for every variant (items or a cart, with or without an
``Idempotency-Key``): each checkout merges its items once and asks the sold-out memory once, whichever variant."""

import pytest

from checkout import services
from inventory import soldout
from skincare import validation

pytestmark = pytest.mark.django_db

VARIANTS = ["items", "items under a key", "cart", "cart under a key"]


@pytest.fixture
def calls(monkeypatch):
    """How many times a checkout merged items and asked the sold-out memory."""
    counted = {"merged": 0, "asked": 0}
    merge, known_short = validation.merge_quantities, soldout.known_short

    def counting_merge(*args, **kwargs):
        counted["merged"] += 1
        return merge(*args, **kwargs)

    def counting_known_short(*args, **kwargs):
        counted["asked"] += 1
        return known_short(*args, **kwargs)

    monkeypatch.setattr(validation, "merge_quantities", counting_merge)
    monkeypatch.setattr(soldout, "known_short", counting_known_short)
    return counted


def place(api, variant, product_id):
    """One checkout of two lines of ``product_id`` (merged into one) through the API, as ``variant``."""
    headers = {"HTTP_IDEMPOTENCY_KEY": f"key-{variant}"} if "key" in variant else {}
    items = {"items": [{"product_id": product_id, "qty": 1}, {"product_id": product_id, "qty": 1}]}
    if variant.startswith("cart"):
        cart = api.post("/v1/carts", items, format="json")
        assert cart.status_code == 201, cart.content
        return lambda: api.post(f"/v1/carts/{cart.json()['cart_id']}/checkout", format="json", **headers)
    return lambda: api.post("/v1/checkout", items, format="json", **headers)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_merges_its_items_once_and_asks_the_memory_once(api, make_product, calls, variant):
    product = make_product(stock=5)
    checkout = place(api, variant, product.pk)
    calls.update(merged=0, asked=0)  # the cart's creation merged its own items: not the checkout's

    response = checkout()

    assert response.status_code == 201, response.content
    assert [line["qty"] for line in response.json()["items"]] == [2]
    assert calls == {"merged": 1, "asked": 1}


def test_a_replayed_key_merges_the_body_and_asks_nothing_else(api, make_product, calls):
    product = make_product(stock=5)
    checkout = place(api, "items under a key", product.pk)
    assert checkout().status_code == 201
    calls.update(merged=0, asked=0)

    replay = checkout()

    assert (replay.status_code, replay["Idempotent-Replayed"]) == (201, "true")
    assert calls == {"merged": 1, "asked": 0}


def test_control_a_step_that_asks_the_memory_again_is_counted(api, make_product, calls, monkeypatch):
    """The naive entry: the transaction's step asks the memory whatever was asked before it (as a checkout that
    asks before its transaction and again inside it would). The same count sees the second question."""

    def ask_again(state):
        services.refuse_remembered_short(state.quantities)

    steps = tuple(ask_again if step is services.ask_sold_out_memory else step for step in services.OPEN_ORDER)
    monkeypatch.setattr(services, "OPEN_ORDER", steps)
    product = make_product(stock=5)
    checkout = place(api, "items", product.pk)
    calls.update(merged=0, asked=0)

    assert checkout().status_code == 201
    assert calls == {"merged": 1, "asked": 2}


def test_the_steps_run_in_the_order_the_docs_link_to():
    """``OPEN_ORDER`` is the order of the checks a reader is sent to: each name once, the cart's claim first, the
    quote read before the refusals it decides, the order written before the counts it read, the cart linked last."""
    names = [step.__name__ for step in services.OPEN_ORDER]
    assert len(names) == len(set(names))
    assert names[0] == "claim_cart" and names[-1] == "link_cart"
    assert names.index("ask_sold_out_memory") < names.index("read_quotes") < names.index("refuse_visibly_short")
    assert names.index("refuse_outside_sale_window") < names.index("use_admission") < names.index("write_order")
    assert names.index("write_order") < names.index("refuse_over_limit_with_orders")
    assert names.index("refuse_over_limit_with_orders") < names.index("refuse_too_many_pending")
