"""Sale windows on the product side: the product API's state by the database clock, the service that sets a window,
``flash_sale_setup``'s window options and the admin form (docs/sale-windows.md). Checkout is in
``payments/tests/test_sale_window.py``."""

import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from inventory import catalogue
from inventory.admin.product_form import product_version
from inventory.exceptions import ProductNotFound
from inventory.models import Product
from inventory.tests.test_admin import client_for, make_staff
from skincare.db import db_now
from skincare.errors import InvalidInput

pytestmark = pytest.mark.django_db


def set_window(product, *, starts_in=None, ends_in=None, price=None, max_per_customer=None):
    """Give ``product`` a window relative to the database clock (seconds; None = that end is open)."""
    now = db_now()
    return catalogue.product_sale_set(
        product_id=product.pk,
        starts_at=None if starts_in is None else now + timedelta(seconds=starts_in),
        ends_at=None if ends_in is None else now + timedelta(seconds=ends_in),
        sale_price=None if price is None else Decimal(price),
        max_per_customer=max_per_customer,
    )


def test_product_api_shows_each_window_state_by_the_database_clock(client, make_product):
    scheduled = make_product(price="129.00")
    set_window(scheduled, starts_in=90.25, ends_in=3600, price="99.00")
    open_ = make_product(price="129.00")
    set_window(open_, starts_in=-10, ends_in=3600, price="99.00")
    ended = make_product(price="129.00")
    set_window(ended, starts_in=-20, ends_in=-10, price="99.00")
    only_end = make_product()
    set_window(only_end, ends_in=60)
    plain = make_product()

    listing = {p["id"]: p for p in client.get("/v1/products").json()["products"]}
    detail = client.get(f"/v1/products/{scheduled.pk}").json()

    # The test runs inside one transaction, so now() is the same instant for setup and reads: exact values.
    assert detail["sale"] == "scheduled"
    assert detail["seconds_to_start"] == 90.25
    assert detail["sale_price"] == "99.00" and detail["price"] == "129.00"
    assert detail["sale_starts_at"] is not None and detail["sale_ends_at"] is not None
    assert listing[scheduled.pk] == detail
    assert (listing[open_.pk]["sale"], listing[open_.pk]["seconds_to_start"]) == ("open", None)
    assert (listing[ended.pk]["sale"], listing[ended.pk]["seconds_to_start"]) == ("ended", None)
    assert (listing[only_end.pk]["sale"], listing[only_end.pk]["sale_starts_at"]) == ("open", None)
    assert [listing[plain.pk][key] for key in ("sale", "seconds_to_start", "sale_price")] == [None, None, None]


def test_a_window_ends_exactly_at_its_end_and_opens_exactly_at_its_start(client, make_product):
    ends_now = make_product()
    set_window(ends_now, starts_in=-1, ends_in=0)
    starts_now = make_product()
    set_window(starts_now, starts_in=0, ends_in=1)

    assert client.get(f"/v1/products/{ends_now.pk}").json()["sale"] == "ended"  # [starts_at, ends_at)
    assert client.get(f"/v1/products/{starts_now.pk}").json()["sale"] == "open"


@pytest.mark.parametrize(
    "window, problem",
    [
        ({"starts_in": 10, "ends_in": 10}, "end after it starts"),
        ({"starts_in": 10, "ends_in": 5}, "end after it starts"),
        ({"starts_in": 10, "price": "-1.00"}, "must not be negative"),
        ({"price": "9.00"}, "needs a sale window"),
        ({"starts_in": 10, "max_per_customer": 0}, "at least 1"),
    ],
)
def test_a_bad_window_is_refused_and_changes_nothing(make_product, window, problem):
    product = make_product(price="10.00")
    set_window(product, starts_in=60, ends_in=120, price="5.00", max_per_customer=2)
    before = Product.objects.values().get(pk=product.pk)

    with pytest.raises(InvalidInput, match=problem):
        set_window(product, **window)

    assert Product.objects.values().get(pk=product.pk) == before


def test_sale_set_on_an_unknown_product_is_not_found():
    with pytest.raises(ProductNotFound):
        catalogue.product_sale_set(
            product_id=424242, starts_at=None, ends_at=None, sale_price=None, max_per_customer=None
        )


def test_clearing_the_window_puts_the_product_back_on_plain_sale(client, make_product):
    product = make_product(price="10.00")
    set_window(product, starts_in=60, price="5.00")
    set_window(product)
    body = client.get(f"/v1/products/{product.pk}").json()
    assert (body["sale"], body["sale_price"], body["price"]) == (None, None, "10.00")


def setup(*args):
    out = io.StringIO()
    call_command("flash_sale_setup", *args, stdout=out)
    return out.getvalue()


def test_flash_sale_setup_sets_a_window_relative_to_the_database_clock(make_product):
    product = make_product(stock=3, price="129000.00")

    output = setup(
        "--product", str(product.pk), "--stock", "100", "--starts-in", "2", "--duration", "600",
        "--price", "99000", "--max-per-customer", "1",
    )  # fmt: skip

    product.refresh_from_db()
    now = db_now()  # the command ran in this test's transaction: the same now()
    assert product.sale_starts_at == now + timedelta(seconds=2)
    assert product.sale_ends_at == now + timedelta(seconds=602)
    assert (product.sale_price, product.max_per_customer) == (Decimal("99000.00"), 1)
    assert product.inventory.available_stock == 100
    assert "max_order_id=" in output.splitlines()[0]  # the line the load tests parse is unchanged
    assert "sale scheduled" in output and "opens in 2" in output and "price=99000.00" in output
    assert "max_per_customer=1" in output


def test_flash_sale_setup_takes_absolute_times_and_without_options_clears_the_window(make_product):
    product = make_product(stock=3, max_per_customer=2)

    setup("--product", str(product.pk), "--starts-at", "2030-01-01T12:00:00+07:00", "--ends-at", "2030-01-01T13:00:00Z")
    product.refresh_from_db()
    assert product.sale_starts_at.isoformat() == "2030-01-01T05:00:00+00:00"
    assert product.sale_ends_at.isoformat() == "2030-01-01T13:00:00+00:00"
    assert product.max_per_customer == 2  # not given: unchanged

    output = setup("--product", str(product.pk), "--stock", "5")
    product.refresh_from_db()
    assert (product.sale_starts_at, product.sale_ends_at, product.sale_price) == (None, None, None)
    assert "no sale window" in output


@pytest.mark.parametrize(
    "args",
    [
        ["--starts-in", "10", "--ends-at", "2000-01-01T00:00:00Z"],  # ends before it starts
        ["--price", "5"],  # a sale price without a window
        ["--starts-in", "-1"],
        ["--starts-at", "2030-01-01T12:00:00"],  # no UTC offset
        ["--starts-at", "tomorrow"],
        ["--price", "1.234", "--starts-in", "1"],
        ["--starts-in", "1", "--starts-at", "2030-01-01T12:00:00Z"],  # both
    ],
)
def test_flash_sale_setup_refuses_bad_window_options_and_changes_nothing(make_product, args):
    product = make_product(stock=3)
    before = Product.objects.values().get(pk=product.pk)
    with pytest.raises((CommandError, SystemExit)):
        call_command(
            "flash_sale_setup", "--product", str(product.pk), *args, stdout=io.StringIO(), stderr=io.StringIO()
        )
    assert Product.objects.values().get(pk=product.pk) == before


def test_stock_manager_edits_the_window_in_the_admin_and_a_viewer_cannot(make_product):
    product = make_product(stock=3, price="129.00")
    manager = client_for(make_staff("window-manager", "stock_managers"))
    viewer = client_for(make_staff("window-viewer", "ops_viewers"))
    url = reverse("admin:inventory_product_change", args=[product.pk])
    form = {
        "sku": product.sku,
        "name": product.name,
        "price": "129.00",
        "is_active": "on",
        "inventory_strategy": "guarded_update",
        "stock_buckets": "1",
        "sale_starts_at_0": "2030-01-01",
        "sale_starts_at_1": "12:00:00",
        "sale_ends_at_0": "2030-01-01",
        "sale_ends_at_1": "13:00:00",
        "sale_price": "99.00",
        "inventory-TOTAL_FORMS": "1",
        "inventory-INITIAL_FORMS": "1",
        "inventory-MIN_NUM_FORMS": "0",
        "inventory-MAX_NUM_FORMS": "1",
        "inventory-0-product": str(product.pk),
        "loaded_version": product_version(product.pk),  # the page as loaded (the stale-page check)
    }

    page = manager.get(url).content.decode()
    assert 'name="sale_starts_at_0"' in page and 'name="sale_price"' in page
    assert viewer.post(url, form).status_code == 403
    backwards = manager.post(url, {**form, "sale_ends_at_1": "11:00:00"})
    assert backwards.status_code == 200  # the form again, with the database rule as its error
    assert "The sale must end after it starts." in backwards.content.decode()
    product.refresh_from_db()
    assert product.sale_starts_at is None
    saved = manager.post(url, form)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    product.refresh_from_db()
    assert product.sale_price == Decimal("99.00")
    assert product.sale_ends_at - product.sale_starts_at == timedelta(hours=1)
