"""The waiting room over HTTP and through the checkout: join and poll, the refusals that write nothing, and the
checkout's admission check on /v1/checkout and the cart checkout (docs/queue.md)."""

import math

import pytest
from django.db import connection
from rest_framework.test import APIClient

from carts import services as cart_services
from devtools.testing import assert_invariants, make_overdue
from orders import services as order_services
from orders.models import Order
from waitingroom import services
from waitingroom.models import QueuePass
from waitingroom.selectors import poll_after_seconds
from waitingroom.testing import admit_now, lapse_admissions, queue_product, sale_starts_in

pytestmark = pytest.mark.django_db


def client_for(customer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {customer.api_token}")
    return client


def checkout(client, product, qty=1, key=None):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": qty}]}, format="json", **headers)


def test_join_gives_one_pass_201_then_200_and_get_answers_the_same_body(api, make_product, settings):
    product = make_product(stock=5)
    queue_product(product, pace=7, starts_in=60)

    first = api.post(f"/v1/products/{product.pk}/queue")
    again = api.post(f"/v1/products/{product.pk}/queue")

    assert first.status_code == 201, first.json()
    assert again.status_code == 200
    body = first.json()
    assert again.json() == body
    assert body["state"] == "waiting" and body["position"] is None and body["paused"] is False
    assert body["admit_per_second"] == 7 and body["units_may_return"] is False
    assert body["poll_after"] == settings.QUEUE_POLL_MAX_SECONDS  # at most that, whatever the time to the opening
    assert 59 <= body["eta_seconds"] <= 60
    assert body["poll_url"] == f"/v1/queue/passes/{body['pass_id']}" and body["poll_header"] == "Queue-Pass"
    signed = {key: body.pop(key) for key in ("pass_token", "poll_url", "poll_header")}
    assert api.get(f"/v1/products/{product.pk}/queue").json() == body
    assert api.get(f"/v1/queue/passes/{body['pass_id']}").json() == body
    with_token = api.get(signed["poll_url"], HTTP_QUEUE_PASS=signed["pass_token"])
    assert with_token.json() == body
    assert QueuePass.objects.filter(product=product).count() == 1


def test_another_customers_pass_is_a_404(api, make_customer, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=60)
    pass_id = api.post(f"/v1/products/{product.pk}/queue").json()["pass_id"]
    other = client_for(make_customer())

    assert other.get(f"/v1/queue/passes/{pass_id}").status_code == 404
    response = other.get(f"/v1/products/{product.pk}/queue")
    assert (response.status_code, response.json()["code"]) == (404, "queue_not_found")


def test_refused_joins_write_nothing(api, make_product):
    plain = make_product(stock=5)
    assert (api.post(f"/v1/products/{plain.pk}/queue").json()["code"]) == "queue_not_found"
    assert api.post("/v1/products/999999999/queue").status_code == 404

    early = make_product(stock=5)
    queue_product(early, starts_in=3600 + 600)  # the queue opens QUEUE_OPENS_BEFORE_SECONDS (3600) before
    response = api.post(f"/v1/products/{early.pk}/queue")
    assert (response.status_code, response.json()["code"]) == (409, "queue_not_open")
    assert 599 <= int(response["Retry-After"]) <= 600 and response.json()["opens_at"]

    ended = make_product(stock=5)
    queue_product(ended)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE products SET sale_ends_at = now() - interval '1 second' WHERE id = %s", [ended.pk])
    response = api.post(f"/v1/products/{ended.pk}/queue")
    assert (response.status_code, response.json()["code"]) == (410, "sale_ended")

    gone = make_product(stock=0)
    queue_product(gone)
    response = api.post(f"/v1/products/{gone.pk}/queue")
    assert (response.status_code, response.json()["code"]) == (409, "sold_out")

    assert QueuePass.objects.count() == 0


def test_checkout_of_a_queued_product_needs_an_admission_and_uses_it(api, make_product):
    product = make_product(stock=5, max_per_customer=1)
    queue_product(product, starts_in=-1)

    refused = checkout(api, product)
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "admission_required" and body["pass_states"] == ["none"]
    assert body["queue_urls"] == [f"/v1/products/{product.pk}/queue"] and int(refused["Retry-After"]) >= 1

    api.post(f"/v1/products/{product.pk}/queue")
    assert checkout(api, product).json()["pass_states"] == ["waiting"]
    admit_now(product)
    admitted = api.get(f"/v1/products/{product.pk}/queue").json()
    assert admitted["state"] == "admitted" and admitted["admitted_until"] and admitted["poll_after"] is None

    too_many = checkout(api, product, qty=2)  # refused for quantity: the admission is kept
    assert too_many.json()["code"] == "purchase_limit_exceeded"
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "admitted"
    beyond = checkout(api, product, qty=3)  # more than one admission buys (QUEUE_UNITS_PER_ADMISSION = 2)
    assert (beyond.status_code, beyond.json()["code"], beyond.json()["max_units"]) == (
        409,
        "admission_units_exceeded",
        2,
    )
    assert "Retry-After" not in beyond
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "admitted"

    bought = checkout(api, product)
    assert bought.status_code == 201, bought.json()
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "used"
    again = checkout(api, product)  # one admission, one checkout
    assert (again.status_code, again.json()["code"]) == (409, "admission_used")
    assert "Retry-After" not in again  # final: nothing to wait for
    assert Order.objects.count() == 1
    assert_invariants()


def test_a_lapsed_admission_is_admission_expired_and_its_turn_goes_to_the_next(api, make_customer, make_product):
    product = make_product(stock=1)
    queue_product(product, starts_in=-1)
    api.post(f"/v1/products/{product.pk}/queue")
    next_client = client_for(make_customer())
    next_client.post(f"/v1/products/{product.pk}/queue")
    admit_now(product)  # one unit: one admission
    assert next_client.get(f"/v1/products/{product.pk}/queue").json()["state"] == "waiting"

    lapse_admissions(product)
    refused = checkout(api, product)
    assert (refused.status_code, refused.json()["code"]) == (410, "admission_expired")
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "expired"
    admit_now(product)
    assert next_client.get(f"/v1/products/{product.pk}/queue").json()["state"] == "admitted"
    assert checkout(next_client, product).status_code == 201
    assert Order.objects.count() == 1


def test_a_keyed_checkout_refused_before_admission_buys_with_the_same_key_once_admitted(api, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)
    api.post(f"/v1/products/{product.pk}/queue")

    assert checkout(api, product, key="buy-1").json()["code"] == "admission_required"  # not stored
    admit_now(product)
    bought = checkout(api, product, key="buy-1")
    replay = checkout(api, product, key="buy-1")

    assert bought.status_code == 201, bought.json()
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    assert replay.json()["order_id"] == bought.json()["order_id"]
    assert Order.objects.count() == 1


def test_the_cart_checkout_needs_the_admission_too(api, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)
    cart = cart_services.cart_create(customer=api.customer, items=[(product.pk, 1)])

    refused = api.post(f"/v1/carts/{cart.cart_id}/checkout")
    assert (refused.status_code, refused.json()["code"]) == (409, "admission_required")
    assert api.get(f"/v1/carts/{cart.cart_id}").json()["status"] == "open"  # the refusal leaves the cart open

    api.post(f"/v1/products/{product.pk}/queue")
    admit_now(product)
    bought = api.post(f"/v1/carts/{cart.cart_id}/checkout")
    assert bought.status_code == 201, bought.json()
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "used"


def test_a_product_without_a_queue_sells_as_before(api, make_product):
    product = make_product(stock=1)
    assert checkout(api, product).status_code == 201


def test_sold_out_ends_the_queue_and_a_returned_unit_keeps_it_waiting(api, make_customer, make_product):
    product = make_product(stock=1)
    queue_product(product, starts_in=-1)
    buyer = client_for(make_customer())
    buyer.post(f"/v1/products/{product.pk}/queue")
    api.post(f"/v1/products/{product.pk}/queue")
    admit_now(product)
    order_id = checkout(buyer, product).json()["order_id"]

    waiting = api.get(f"/v1/products/{product.pk}/queue").json()
    assert waiting["state"] == "waiting" and waiting["units_may_return"] is True  # a unit is reserved, unpaid

    order = Order.objects.get(pk=order_id)
    order_services.order_cancel(order_id=order.pk)  # the unit comes back: the next in line is admitted
    admit_now(product)
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "admitted"
    assert checkout(api, product).status_code == 201

    late = client_for(make_customer())
    late.post(f"/v1/products/{product.pk}/queue")
    make_overdue(Order.objects.get(status="pending_payment"))
    # Still reserved: waiting. Paid now: nothing can come back.
    assert late.get(f"/v1/products/{product.pk}/queue").json()["state"] == "waiting"
    with connection.cursor() as cursor:
        cursor.execute("UPDATE stock_buckets SET reserved_stock = 0 WHERE product_id = %s", [product.pk])
    assert late.get(f"/v1/products/{product.pk}/queue").json()["state"] == "sold_out"


def test_pause_is_visible_in_every_pass_and_admits_nobody(api, make_product, settings):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)
    api.post(f"/v1/products/{product.pk}/queue")
    services.queue_pause(product_id=product.pk, paused=True)

    assert admit_now(product).admitted == 0  # placed, not admitted
    body = api.get(f"/v1/products/{product.pk}/queue").json()
    assert (body["state"], body["position"], body["ahead"]) == ("waiting", 1, 0)
    assert (
        body["paused"] is True and body["eta_seconds"] is None and body["poll_after"] == settings.QUEUE_POLL_MAX_SECONDS
    )

    services.queue_pause(product_id=product.pk, paused=False)
    assert admit_now(product).admitted == 1
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "admitted"


def test_sale_window_still_comes_first(api, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=30)
    assert checkout(api, product).json()["code"] == "sale_not_started"
    sale_starts_in(product, -1)
    assert checkout(api, product).json()["code"] == "admission_required"


@pytest.mark.parametrize("waiting", [5_000, 100_000, 1_000_000])
def test_the_total_poll_rate_stays_under_the_stated_bound(waiting, settings):
    """docs/queue.md#polling: N waiting passes at pace r poll at most 2r(1 + ln(P_max / P_min)) + N / P_max times a
    second."""
    pace = 50
    rate = sum(1 / poll_after_seconds(ahead=d, pace=pace, paused=False) for d in range(waiting))
    p_min, p_max = settings.QUEUE_POLL_MIN_SECONDS, settings.QUEUE_POLL_MAX_SECONDS
    bound = 2 * pace * (1 + math.log(p_max / p_min)) + waiting / p_max
    assert rate <= bound
    assert rate > bound / 2  # the bound is not loose by orders of magnitude


def seconds_late(raised_at: int, settings) -> float:
    """10,000 ahead at 10 per second, the pace raised to 50 at ``raised_at``: how long after its admission a client
    polling when told sees it (the signed poll's counters QUEUE_COUNTERS_MAX_AGE_SECONDS old)."""
    position = 10_000
    lag = settings.QUEUE_COUNTERS_MAX_AGE_SECONDS

    def admitted_through(t: float) -> float:
        return 10 * min(t, raised_at) + 50 * max(0.0, t - raised_at)

    admitted_at = next(t / 10 for t in range(0, 10_000_000) if admitted_through(t / 10) >= position)
    t = 0.0
    while admitted_through(max(0.0, t - lag)) < position:  # what the poll sees: counters up to `lag` old
        ahead = position - int(admitted_through(max(0.0, t - lag))) - 1
        t += poll_after_seconds(ahead=ahead, pace=10 if t < raised_at else 50, paused=False)
    return t - admitted_at


@pytest.mark.parametrize("raised_at", [0, 50, 150, 190, 400])
def test_a_client_that_obeys_poll_after_sees_its_admission_in_time_when_ops_raise_the_pace(raised_at, settings):
    """With at least half the admission's TTL left, however the pace changes: poll_after is at most
    QUEUE_POLL_MAX_SECONDS."""
    assert seconds_late(raised_at, settings) <= settings.ADMISSION_TTL_SECONDS / 2


def test_control_an_unbounded_poll_after_misses_the_admission_when_the_pace_is_raised(settings):
    settings.QUEUE_POLL_MAX_SECONDS = 10**6  # half the ETA, no upper bound
    assert seconds_late(50, settings) > settings.ADMISSION_TTL_SECONDS  # told 500 s, admitted at ~240 s: lapsed
