import pytest
from rest_framework.test import APIClient

from checkout.testing import place_order

pytestmark = pytest.mark.django_db


def test_owner_sees_order_anyone_else_gets_404(api, make_product, make_customer):
    product = make_product(stock=5, price="12.50")
    order = place_order(customer=api.customer, items=[(product.pk, 2)])

    mine = api.get(f"/v1/orders/{order.pk}")
    assert mine.status_code == 200
    assert mine.json()["order_id"] == order.pk
    assert mine.json()["total"] == "25.00"
    assert mine.json()["items"] == [{"product_id": product.pk, "qty": 2, "unit_price": "12.50"}]

    stranger = make_customer()
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {stranger.api_token}")
    theirs = other.get(f"/v1/orders/{order.pk}")
    missing = other.get("/v1/orders/999999")
    assert theirs.status_code == 404
    # Someone else's order is indistinguishable from a missing one.
    assert {k: v for k, v in theirs.json().items() if k != "order_id"} == {
        k: v for k, v in missing.json().items() if k != "order_id"
    }
    assert theirs.json()["code"] == "order_not_found"


def test_order_detail_requires_a_token(client):
    assert client.get("/v1/orders/1").status_code == 401
