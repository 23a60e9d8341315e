"""A stale product page cannot write back an old sale window or price: the page carries a digest of the
product's editable fields as loaded, and saving refuses when they changed since (+ control: with the digest of the
current row, the same old values are written, which is what a page without the check did)."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse

from inventory.admin.product_form import STALE_PRODUCT_MESSAGE, product_version
from inventory.models import Product
from inventory.permissions import ensure_ops_groups

pytestmark = pytest.mark.django_db


def manager_client(django_user_model):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("window-ops", password="right-password-for-tests", is_staff=True)
    ensure_ops_groups()["stock_managers"].user_set.add(user)
    client = Client()
    client.force_login(user)
    return client


def form_as_loaded(page: str, product: Product) -> dict[str, str]:
    loaded = re.search(r'name="loaded_version" value="([0-9a-f]+)"', page)
    assert loaded, "the page carries the version it was loaded at"
    return {
        "sku": product.sku,
        "name": product.name,
        "price": "129.00",
        "is_active": "on",
        "inventory_strategy": "guarded_update",
        "stock_buckets": "1",
        "sale_starts_at_0": "2030-01-01",
        "sale_starts_at_1": "12:00:00",
        "sale_ends_at_0": "2030-01-01",
        "sale_ends_at_1": "14:00:00",
        "sale_price": "99.00",
        "inventory-TOTAL_FORMS": "1",
        "inventory-INITIAL_FORMS": "1",
        "inventory-MIN_NUM_FORMS": "0",
        "inventory-MAX_NUM_FORMS": "1",
        "inventory-0-product": str(product.pk),
        "loaded_version": loaded.group(1),
    }


def test_a_stale_page_cannot_resume_a_sale_that_ops_just_ended(make_product, django_user_model):  # type: ignore[no-untyped-def]
    product = make_product(stock=3, price="129.00")
    client = manager_client(django_user_model)
    url = reverse("admin:inventory_product_change", args=[product.pk])
    stale = form_as_loaded(client.get(url).content.decode(), product)

    # Meanwhile ops end the sale (here with a service-style UPDATE that does not even touch updated_at).
    Product.objects.filter(pk=product.pk).update(sale_starts_at=Now() - timedelta(hours=1), sale_ends_at=Now())
    ended = Product.objects.values_list("sale_starts_at", "sale_ends_at", "sale_price").get(pk=product.pk)

    refused = client.post(url, stale)
    assert refused.status_code == 200
    assert STALE_PRODUCT_MESSAGE in refused.content.decode()
    assert Product.objects.values_list("sale_starts_at", "sale_ends_at", "sale_price").get(pk=product.pk) == ended

    # A page loaded now saves (the change is made against the current values).
    fresh = form_as_loaded(client.get(url).content.decode(), product)
    assert client.post(url, {**fresh, "price": "120.00", "sale_price": ""}).status_code in (200, 302)


def test_a_price_changed_since_the_page_was_loaded_is_not_overwritten(make_product, django_user_model):  # type: ignore[no-untyped-def]
    product = make_product(stock=3, price="129.00")
    client = manager_client(django_user_model)
    url = reverse("admin:inventory_product_change", args=[product.pk])
    stale = {**form_as_loaded(client.get(url).content.decode(), product), "sale_price": "", "sale_starts_at_0": ""}
    stale.update({"sale_starts_at_1": "", "sale_ends_at_0": "", "sale_ends_at_1": ""})
    Product.objects.filter(pk=product.pk).update(price=Decimal("149.00"))

    assert client.post(url, stale).status_code == 200
    assert Product.objects.get(pk=product.pk).price == Decimal("149.00")
    # A missing version is refused too (fail closed), not treated as "no check".
    assert client.post(url, {**stale, "loaded_version": ""}).status_code == 200
    assert Product.objects.get(pk=product.pk).price == Decimal("149.00")


def test_control_with_the_current_version_the_old_values_are_written(make_product, django_user_model):  # type: ignore[no-untyped-def]
    """What a page without the check did: the old window is written back and the ended sale resumes."""
    product = make_product(stock=3, price="129.00")
    client = manager_client(django_user_model)
    url = reverse("admin:inventory_product_change", args=[product.pk])
    stale = form_as_loaded(client.get(url).content.decode(), product)
    Product.objects.filter(pk=product.pk).update(sale_starts_at=Now() - timedelta(hours=1), sale_ends_at=Now())

    saved = client.post(url, {**stale, "loaded_version": product_version(product.pk)})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert Product.objects.get(pk=product.pk).sale_ends_at.year == 2030  # the old window is back
