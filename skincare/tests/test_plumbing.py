import io

import pytest
from django.core.management import call_command

from devtools.testing import assert_invariants
from inventory.models import Inventory, Product
from inventory.services import stock_set_counted
from skincare.models import ApiToken, api_token_digest


def test_healthz_needs_no_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_checks_the_database(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_unknown_url_is_json_404(client):
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.json() == {"error": "Not found.", "code": "not_found"}


@pytest.mark.django_db
def test_wrong_method_is_405_json(api):
    response = api.get("/v1/checkout")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


@pytest.mark.django_db
def test_issue_token_creates_customer_and_rotates_token(client):
    first, second = io.StringIO(), io.StringIO()
    call_command("issue_token", "alice", stdout=first)
    call_command("issue_token", "alice", stdout=second)
    old, new = first.getvalue().strip(), second.getvalue().strip()

    assert old != new
    live = ApiToken.objects.filter(user__username="alice", revoked_at__isnull=True)
    assert list(live.values_list("digest", flat=True)) == [api_token_digest(new)]
    assert client.get("/v1/orders/1", HTTP_AUTHORIZATION=f"Bearer {old}").status_code == 401
    assert client.get("/v1/orders/1", HTTP_AUTHORIZATION=f"Bearer {new}").status_code == 404


@pytest.mark.django_db
def test_demo_data_is_idempotent_and_never_overwrites_stock(client):
    call_command("load_demo_data", stdout=io.StringIO())
    serum = Inventory.objects.get(product_id=101)
    assert serum.available_stock > 0
    stock_set_counted(product_id=101, counted=3, expected_version=serum.version, note="stock count")

    call_command("load_demo_data", stdout=io.StringIO())

    assert Inventory.objects.get(product_id=101).available_stock == 3
    assert Product.objects.filter(pk=101).count() == 1
    demo = client.get("/v1/orders/1", HTTP_AUTHORIZATION="Bearer test-customer-token")
    assert demo.status_code == 404  # the demo token authenticates (no such order yet)
    assert_invariants()
