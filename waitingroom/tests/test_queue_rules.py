"""The waiting room's rules one at a time, each on a queue whose clock is the test transaction's (``now()`` does not
move inside it: the credit clock is moved back through the database, never by sleeping), so every count is exact:

* everyone who joined before the opening is placed ahead of everyone who joined after it, in one placement;
* a long gap between advances earns at most QUEUE_MAX_BURST_SECONDS of pace;
* a paused queue admits nobody, even with credit left over from before the pause;
* admissions never exceed the units available minus the admissions still outstanding;
* a waiting pass is sold out once the sale ended, and re-joining a sold-out queue answers the customer's pass;
* the admin's change form pauses and resumes; an ops viewer cannot delete a queue.
"""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.urls import reverse
from rest_framework.test import APIClient

from checkout.testing import place
from inventory.tests.test_admin import client_for, make_staff
from payments import services as payment_services
from waitingroom import counters, services
from waitingroom.models import ProductQueue, QueuePass
from waitingroom.selectors import pass_get
from waitingroom.testing import (
    admit_now,
    admitted_positions,
    lapse_admissions,
    queue_product,
    reset_queue_clock,
    rewind_queue_clock,
    sale_starts_in,
)

pytestmark = pytest.mark.django_db


def make_customers(n, prefix):
    User.objects.bulk_create([User(username=f"{prefix}-{i}") for i in range(n)])
    return list(User.objects.filter(username__startswith=f"{prefix}-").order_by("id"))


def join_all(product, customers):
    for customer in customers:
        services.queue_join(customer=customer, product_id=product.pk)


def positions(product, customers):
    placed = dict(QueuePass.objects.filter(product=product).values_list("customer_id", "position"))
    return [placed[c.pk] for c in customers]


def test_everyone_who_joined_before_the_opening_is_placed_ahead_of_everyone_who_joined_after_it(make_product):
    product = make_product(stock=100)
    queue_product(product, pace=10, starts_in=600)
    early = make_customers(5, "before")
    late = make_customers(5, "after")
    join_all(product, early)
    sale_starts_in(product, -1)
    join_all(product, late)  # between the opening and the first advance

    assert services.queue_advance(product_id=product.pk).placed == 10  # one placement takes both crowds

    assert sorted(positions(product, early)) == [1, 2, 3, 4, 5]  # in the order of their draw
    assert positions(product, late) == [6, 7, 8, 9, 10]  # behind them, by arrival


def test_a_long_gap_between_advances_admits_at_most_the_burst_cap(make_product, settings):
    settings.QUEUE_MAX_BURST_SECONDS = 2
    product = make_product(stock=100)
    queue_product(product, pace=3, starts_in=600)
    join_all(product, make_customers(30, "gap"))
    sale_starts_in(product, -3600)
    reset_queue_clock(product)

    rewind_queue_clock(product, 3600)  # an hour without an advance
    assert services.queue_advance(product_id=product.pk).admitted == 3 * 2
    rewind_queue_clock(product, 3600)
    assert services.queue_advance(product_id=product.pk).admitted == 3 * 2  # nothing piled up in between
    assert admitted_positions(product) == list(range(1, 13))


def test_a_paused_queue_admits_nobody_even_with_credit_left_over(make_product):
    product = make_product(stock=100)
    queue_product(product, pace=5, starts_in=-3600)
    reset_queue_clock(product)
    rewind_queue_clock(product, 2)
    services.queue_advance(product_id=product.pk)  # nobody waiting: the two seconds' credit is left over
    assert ProductQueue.objects.get(pk=product.pk).credit == 10
    services.queue_pause(product_id=product.pk, paused=True)
    join_all(product, make_customers(3, "paused"))

    paused = services.queue_advance(product_id=product.pk)

    assert (paused.placed, paused.admitted) == (3, 0)
    services.queue_pause(product_id=product.pk, paused=False)
    assert services.queue_advance(product_id=product.pk).admitted == 3  # the credit was there all along


def test_admissions_never_exceed_the_units_available_minus_those_outstanding(make_product):
    product = make_product(stock=3)
    queue_product(product, pace=5, starts_in=600)
    customers = make_customers(10, "units")
    join_all(product, customers)
    sale_starts_in(product, -1)

    assert admit_now(product).admitted == 3  # credit for a million, units for three
    assert admit_now(product).admitted == 0  # the three admissions are still outstanding
    first = QueuePass.objects.get(product=product, position=1)
    place(customer=User.objects.get(pk=first.customer_id), items=[(product.pk, 1)])
    assert admit_now(product).admitted == 0  # two units left, two admissions outstanding
    lapse_admissions(product)
    assert admit_now(product).admitted == 2  # the lapsed admissions' turns go to the next two
    assert admitted_positions(product) == [1, 2, 3, 4, 5]


def test_a_waiting_pass_is_sold_out_once_the_sale_ended_even_with_units_left(api, make_product):
    product = make_product(stock=5)
    queue_product(product, starts_in=-60)
    pass_id = api.post(f"/v1/products/{product.pk}/queue").json()["pass_id"]
    assert api.get(f"/v1/queue/passes/{pass_id}").json()["state"] == "waiting"

    with connection.cursor() as cursor:
        cursor.execute("UPDATE products SET sale_ends_at = now() - interval '1 second' WHERE id = %s", [product.pk])

    assert api.get(f"/v1/queue/passes/{pass_id}").json()["state"] == "sold_out"
    assert api.get(f"/v1/products/{product.pk}/queue").json()["state"] == "sold_out"


def test_rejoining_a_sold_out_queue_answers_the_customers_pass(api, make_customer, make_product):
    product = make_product(stock=1)
    queue_product(product, starts_in=-1)
    buyer = make_customer()
    services.queue_join(customer=buyer, product_id=product.pk)
    first = api.post(f"/v1/products/{product.pk}/queue").json()
    admit_now(product)
    order = place(customer=buyer, items=[(product.pk, 1)])
    paid = payment_services.payment_event_apply(  # paid: its unit never comes back, the queue is sold out
        event_id=f"evt-rejoin-{order.order_id}",
        event_type=payment_services.EVENT_SUCCEEDED,
        order_id=order.order_id,
        amount=order.total,
        currency=order.currency,
    )
    assert paid == "paid"
    counters.queue_counters_forget(placements=False)  # as QUEUE_COUNTERS_MAX_AGE_SECONDS later: the joins see it

    again = api.post(f"/v1/products/{product.pk}/queue")

    assert again.status_code == 200, again.json()
    assert (again.json()["pass_id"], again.json()["state"]) == (first["pass_id"], "sold_out")
    assert pass_get(customer_id=buyer.pk, product_id=product.pk).state == "used"
    newcomer = APIClient()
    newcomer.credentials(HTTP_AUTHORIZATION=f"Bearer {make_customer().api_token}")
    assert newcomer.post(f"/v1/products/{product.pk}/queue").json()["code"] == "sold_out"  # only newcomers get 409


def test_the_admin_change_form_pauses_and_resumes_the_queue(make_product):
    product = make_product(stock=5)
    queue_product(product, pace=3, starts_in=-1)
    manager = client_for(make_staff("queue-pauser", "stock_managers"))
    change = reverse("admin:waitingroom_productqueue_change", args=[product.pk])

    assert manager.post(change, {"admit_per_second": "3", "paused": "on"}).status_code == 302
    assert ProductQueue.objects.get(pk=product.pk).paused is True
    assert manager.post(change, {"admit_per_second": "3"}).status_code == 302
    assert ProductQueue.objects.get(pk=product.pk).paused is False


def test_an_ops_viewer_cannot_delete_a_queue(make_product, customer):
    product = make_product(stock=5)
    queue_product(product, starts_in=-1)
    services.queue_join(customer=customer, product_id=product.pk)
    viewer = client_for(make_staff("queue-watcher", "ops_viewers"))
    delete = reverse("admin:waitingroom_productqueue_delete", args=[product.pk])
    changelist = reverse("admin:waitingroom_productqueue_changelist")

    assert viewer.get(delete).status_code == 403
    assert viewer.post(delete, {"post": "yes"}).status_code == 403
    viewer.post(changelist, {"action": "delete_selected", "_selected_action": [product.pk], "post": "yes"})

    assert ProductQueue.objects.filter(pk=product.pk).exists()
    assert QueuePass.objects.filter(product=product).count() == 1
    # Control: a stock manager's delete removes the queue and its passes.
    manager = client_for(make_staff("queue-remover", "stock_managers"))
    assert manager.post(delete, {"post": "yes"}).status_code == 302
    assert not ProductQueue.objects.filter(pk=product.pk).exists()
    assert not QueuePass.objects.filter(product=product).exists()
