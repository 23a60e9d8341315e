"""Amounts the gateway can take: Midtrans charges whole rupiah (Snap's gross_amount is an integer), so while it is
the gateway a price or sale price with a fraction is refused where it is set (the product page, the catalogue's
services that flash_sale_setup and the demo data use), naming the gateway's rule; with the sandbox it is accepted
(control). A total is never rounded on its way out (payments/tests/test_midtrans.py)."""

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from inventory import catalogue
from inventory.models import Product
from inventory.tests.test_admin import superuser_client  # noqa: F401 - the fixture
from skincare.errors import InvalidInput

pytestmark = pytest.mark.django_db

RULE = "Midtrans charges whole rupiah only"


def add_in_the_admin(client, price):
    return client.post(
        reverse("admin:inventory_product_add"),
        {
            "sku": "WHOLE-1",
            "name": "Serum",
            "price": price,
            "is_active": "on",
            "inventory_strategy": "guarded_update",
            "stock_buckets": "1",
            "inventory-TOTAL_FORMS": "0",
            "inventory-INITIAL_FORMS": "0",
            "inventory-MIN_NUM_FORMS": "0",
            "inventory-MAX_NUM_FORMS": "1",
        },
    )


def test_with_midtrans_a_price_with_a_fraction_is_refused_in_the_admin(settings, superuser_client):  # noqa: F811
    settings.PAYMENT_GATEWAY = "midtrans"

    refused = add_in_the_admin(superuser_client, "129000.50")

    assert refused.status_code == 200 and RULE in refused.content.decode()
    assert not Product.objects.filter(sku="WHOLE-1").exists()
    assert add_in_the_admin(superuser_client, "129000.00").status_code == 302


def test_with_the_sandbox_a_price_with_a_fraction_is_accepted(settings, superuser_client):  # noqa: F811
    settings.PAYMENT_GATEWAY = "sandbox"
    assert add_in_the_admin(superuser_client, "9.99").status_code == 302


def test_with_midtrans_the_catalogue_refuses_a_price_or_sale_price_with_a_fraction(settings, make_product):
    settings.PAYMENT_GATEWAY = "midtrans"
    with pytest.raises(InvalidInput, match=RULE):
        catalogue.product_create(sku="WHOLE-2", name="Toner", price=Decimal("99000.01"))
    assert not Product.objects.filter(sku="WHOLE-2").exists()
    product = make_product(price="129000.00")
    with pytest.raises(InvalidInput, match=RULE):
        catalogue.product_sale_set(
            product_id=product.pk,
            starts_at=None,
            ends_at=product.created_at,
            sale_price=Decimal("99.5"),
            max_per_customer=None,
        )
    product.refresh_from_db()
    assert product.sale_price is None and product.sale_ends_at is None


def test_with_midtrans_flash_sale_setup_refuses_a_sale_price_with_a_fraction(settings, make_product):
    settings.PAYMENT_GATEWAY = "midtrans"
    product = make_product(price="129000.00")
    with pytest.raises(CommandError, match=RULE):
        call_command(
            "flash_sale_setup",
            "--product",
            str(product.pk),
            "--duration",
            "60",
            "--price",
            "99000.50",
            stdout=StringIO(),
        )
    product.refresh_from_db()
    assert product.sale_price is None


def test_the_demo_data_loads_with_midtrans(settings):
    settings.PAYMENT_GATEWAY = "midtrans"
    call_command("load_demo_data", stdout=StringIO())
    assert Product.objects.filter(pk=101).exists()
