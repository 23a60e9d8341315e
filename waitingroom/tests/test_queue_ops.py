"""Ops: ``flash_sale_setup --queue --admit-per-second N``, the admin (state per product, pace, pause/resume) and
the metrics."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from inventory.tests.test_admin import client_for, make_staff
from skincare import metrics
from waitingroom import selectors, services
from waitingroom.metrics import QueueCollector
from waitingroom.models import ProductQueue, QueuePass
from waitingroom.testing import admit_now, queue_product

pytestmark = pytest.mark.django_db


def test_flash_sale_setup_gives_the_product_a_fresh_queue_and_without_queue_none(make_product, customer):
    product = make_product(stock=5)
    queue_product(product, starts_in=60)
    services.queue_join(customer=customer, product_id=product.pk)
    out = io.StringIO()

    call_command(
        "flash_sale_setup", "--product", str(product.pk), "--stock", "50", "--starts-in", "60", "--queue",
        "--admit-per-second", "25", stdout=out,
    )  # fmt: skip

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("flash_sale_setup: product") and "max_order_id=" in lines[0]
    assert lines[2].startswith("flash_sale_setup: queue admit_per_second=25 ")
    assert ProductQueue.objects.get(pk=product.pk).admit_per_second == 25
    assert not QueuePass.objects.filter(product=product).exists()  # a new sale, a new line

    out = io.StringIO()
    call_command("flash_sale_setup", "--product", str(product.pk), "--stock", "50", stdout=out)
    assert len(out.getvalue().splitlines()) == 2
    assert not ProductQueue.objects.filter(pk=product.pk).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--admit-per-second", "5"], "needs --queue"), (["--queue", "--admit-per-second", "0"], "at least 1")],
)
def test_flash_sale_setup_refuses_a_bad_pace(make_product, args, message):
    product = make_product(stock=5)
    with pytest.raises(CommandError, match=message):
        call_command("flash_sale_setup", "--product", str(product.pk), *args, stdout=io.StringIO())
    assert not ProductQueue.objects.exists()


def test_the_admin_shows_each_queue_and_a_stock_manager_pauses_resumes_and_sets_the_pace(make_product, customer):
    product = make_product(stock=5)
    queue_product(product, pace=3, starts_in=-1)
    services.queue_join(customer=customer, product_id=product.pk)
    admit_now(product)
    manager = client_for(make_staff("queue-manager", "stock_managers"))
    viewer = client_for(make_staff("queue-viewer", "ops_viewers"))
    changelist = reverse("admin:waitingroom_productqueue_changelist")

    page = viewer.get(changelist)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Admitted (outstanding)" in html and 'class="field-admitted">1<' in html
    assert 'class="field-waiting">0<' in html
    assert viewer.post(changelist, {"action": "pause", "_selected_action": [product.pk]}).status_code in (403, 200)
    assert ProductQueue.objects.get(pk=product.pk).paused is False  # a viewer cannot pause

    manager.post(changelist, {"action": "pause", "_selected_action": [product.pk]})
    assert ProductQueue.objects.get(pk=product.pk).paused is True
    manager.post(changelist, {"action": "resume", "_selected_action": [product.pk]})
    assert ProductQueue.objects.get(pk=product.pk).paused is False

    change = reverse("admin:waitingroom_productqueue_change", args=[product.pk])
    assert manager.post(change, {"admit_per_second": "40"}).status_code == 302
    assert ProductQueue.objects.get(pk=product.pk).admit_per_second == 40
    assert viewer.post(change, {"admit_per_second": "1"}).status_code == 403
    assert ProductQueue.objects.get(pk=product.pk).admit_per_second == 40


def test_metrics_count_waiting_admitted_and_admissions(make_product, make_customer):
    product = make_product(stock=1)
    queue_product(product, starts_in=-1)
    for _ in range(3):
        services.queue_join(customer=make_customer(), product_id=product.pk)
    before = metrics.registry().get_sample_value("skincare_queue_admissions_total") or 0
    admit_now(product)

    assert metrics.registry().get_sample_value("skincare_queue_admissions_total") == before + 1
    samples = {
        (family.name, sample.labels["product_id"]): sample.value
        for family in QueueCollector().collect()
        for sample in family.samples
    }
    assert samples[("skincare_queue_waiting", str(product.pk))] == 2
    assert samples[("skincare_queue_admitted", str(product.pk))] == 1
    assert samples[("skincare_queue_admit_per_second", str(product.pk))] == 10
    exposed = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()  # as wired: counts read at the scrape
    assert f'skincare_queue_waiting{{product_id="{product.pk}"}} 2.0' in exposed


def test_the_sale_board_shows_a_queued_products_waiting_room_and_none_for_the_others(make_product, customer):
    queued, plain = make_product(stock=5), make_product(stock=5)
    queue_product(queued, pace=3, starts_in=-1)
    services.queue_join(customer=customer, product_id=queued.pk)
    viewer = client_for(make_staff("board-viewer", "ops_viewers"))

    data = viewer.get(reverse("sale-board-data"), {"product": [queued.pk, plain.pk]}).json()
    boards = {p["id"]: p for p in data["products"]}

    assert boards[plain.pk]["queue"] is None
    shown = boards[queued.pk]["queue"]
    assert (shown["waiting"], shown["admitted"], shown["admitted_per_second"], shown["paused"]) == (1, 0, 3, False)
    assert shown["pause_url"] == reverse("admin:waitingroom_productqueue_change", args=[queued.pk])
    services.queue_pause(product_id=queued.pk, paused=True)
    data = viewer.get(reverse("sale-board-data"), {"product": [queued.pk]}).json()
    assert {p["id"]: p for p in data["products"]}[queued.pk]["queue"]["paused"] is True


def test_queue_counts_from_the_counters_equal_the_passes_counted_one_by_one(make_product, make_customer):
    """The ops counts (queue_states) are read from the queue's counters and two small index scans; they must equal
    every pass's own state (PASS_OWN_STATE_SQL) counted over the whole queue."""
    product = make_product(stock=6)
    queue_product(product, pace=50, starts_in=-1)
    customers = [make_customer() for _ in range(12)]
    for customer in customers:
        services.queue_join(customer=customer, product_id=product.pk)
    admit_now(product)  # six admitted, six placed and waiting
    late = make_customer()
    services.queue_join(customer=late, product_id=product.pk)  # not placed yet
    with connection.cursor() as cursor:  # of the six admitted: two used, two lapsed, two outstanding
        cursor.execute(
            "UPDATE queue_passes SET used_at = now() WHERE product_id = %s AND position IN (1, 2)", [product.pk]
        )
        cursor.execute(
            "UPDATE queue_passes SET admitted_until = now() - interval '1 second' "
            "WHERE product_id = %s AND position IN (3, 4)",
            [product.pk],
        )
        cursor.execute(
            f"SELECT state, count(*) FROM (SELECT {selectors.PASS_OWN_STATE_SQL} AS state FROM queue_passes qp "
            "WHERE qp.product_id = %s) s GROUP BY state",
            [product.pk],
        )
        one_by_one = dict(cursor.fetchall())
    (state,) = selectors.queue_states(product_ids=[product.pk])
    counted = {"waiting": state.waiting, "admitted": state.admitted, "used": state.used, "expired": state.expired}
    assert counted == one_by_one == {"waiting": 7, "admitted": 2, "used": 2, "expired": 2}
