"""What a signed poll and a join must still say, each tested by itself: a sold-out product ends the wait on the
signed path too (placed or before the opening), the first polls after the opening are spread over
QUEUE_POLL_MAX_SECONDS, and the pass cookie is sent only over HTTPS in production."""

import pytest

from inventory.services import stock_adjust
from waitingroom import counters, passtoken, selectors
from waitingroom.testing import queue_product
from waitingroom.tests.test_signed_pass import join, placed_pass, poll

pytestmark = pytest.mark.django_db


def sell_out(product):
    """Ops take the last units away (nothing reserved): no unit can lead to a purchase any more."""
    stock_adjust(product_id=product.pk, delta=-5, note="damaged in the warehouse")
    counters.queue_counters_forget(placements=False)  # as when QUEUE_COUNTERS_MAX_AGE_SECONDS has passed


def test_a_placed_signed_pass_sees_the_product_sold_out(api, make_product):
    product = make_product(stock=5)
    url, token = placed_pass(api, product)
    assert poll(api, url, token).json()["state"] == "waiting"

    sell_out(product)

    answer = poll(api, url, token).json()
    assert answer["state"] == "sold_out" and answer["poll_after"] is None


def test_a_signed_pass_before_the_opening_sees_the_product_sold_out(api, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=600)
    url, token = join(api, product)
    assert poll(api, url, token).json()["state"] == "waiting"

    sell_out(product)  # before it opened: nothing to wait for

    assert poll(api, url, token).json()["state"] == "sold_out"


def test_the_first_polls_after_the_opening_are_spread(settings):
    """Every pass that joined before the opening is told to come back at the opening plus its own random slot of
    QUEUE_POLL_MAX_SECONDS, so the first polls arrive spread over it instead of in the same second."""
    settings.QUEUE_POLL_MAX_SECONDS = 60
    settings.QUEUE_POLL_MIN_SECONDS = 1
    answers = [selectors.poll_before_opening_seconds(seconds_to_start=5) for _ in range(400)]
    assert min(answers) >= 5 and max(answers) <= 60
    assert len(set(answers)) >= 30  # 56 possible slots; 400 draws land in far more than 30 of them
    assert max(answers) - min(answers) >= 40


def test_the_pass_cookie_is_sent_only_over_https_in_production(api, make_product, settings):
    settings.DEBUG = False
    product = make_product(stock=5)
    queue_product(product, starts_in=600)
    response = api.post(f"/v1/products/{product.pk}/queue")
    cookie = response.cookies[f"{passtoken.COOKIE_PREFIX}{response.json()['pass_id']}"]
    assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "Strict"
