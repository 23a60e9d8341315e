"""The public product page during a sale: at most PRODUCT_READ_MAX_AGE_SECONDS old (this process remembers the
read), with Cache-Control and an ETag so a proxy or CDN in front can answer the crowd; a checkout never reads it."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from inventory import selectors, services

pytestmark = pytest.mark.django_db


@pytest.fixture
def remembered(settings):
    settings.PRODUCT_READ_MAX_AGE_SECONDS = 1
    selectors.product_reads_forget()
    yield
    selectors.product_reads_forget()


def test_the_product_page_is_read_once_per_process_and_revalidates_with_its_etag(remembered, make_product):
    product = make_product(stock=5)
    client = APIClient()
    first = client.get(f"/v1/products/{product.pk}")
    assert first.status_code == 200 and first["Cache-Control"] == "public, max-age=1"
    with CaptureQueriesContext(connection) as queries:
        again = client.get(f"/v1/products/{product.pk}")
        unchanged = client.get(f"/v1/products/{product.pk}", HTTP_IF_NONE_MATCH=first["ETag"])
    assert len(queries) == 0
    assert again.json()["available_stock"] == 5 and again["ETag"] == first["ETag"]
    assert unchanged.status_code == 304 and unchanged["ETag"] == first["ETag"]


def test_control_read_afresh_a_stock_change_changes_the_etag(settings, make_product):
    settings.PRODUCT_READ_MAX_AGE_SECONDS = 0
    product = make_product(stock=5)
    client = APIClient()
    first = client.get(f"/v1/products/{product.pk}")
    assert first["Cache-Control"] == "no-cache"
    services.stock_adjust(product_id=product.pk, delta=-1, note="test")
    with CaptureQueriesContext(connection) as queries:
        changed = client.get(f"/v1/products/{product.pk}", HTTP_IF_NONE_MATCH=first["ETag"])
    assert len(queries) == 1
    assert changed.status_code == 200 and changed.json()["available_stock"] == 4
    assert changed["ETag"] != first["ETag"]
