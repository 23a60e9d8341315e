"""Ids in paths are PostgreSQL bigints (``skincare.validation.DatabaseIdConverter``): a larger number names no row, so
it is a 404 like any unknown id, never a database error. Found by Schemathesis (a queue join for product
189111552889997262848 answered 500)."""

import pytest
from django.urls import Resolver404, resolve

from skincare.validation import BIGINT_MAX

TOO_LARGE = BIGINT_MAX + 1


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", f"/v1/products/{TOO_LARGE}"),
        ("post", f"/v1/products/{TOO_LARGE}/queue"),
        ("get", f"/v1/products/{TOO_LARGE}/queue"),
        ("get", f"/v1/queue/passes/{TOO_LARGE}"),
        ("get", f"/v1/orders/{TOO_LARGE}"),
        ("post", f"/v1/orders/{TOO_LARGE}/cancel"),
        ("get", "/v1/products/" + "9" * 5000),
    ],
)
def test_an_id_beyond_a_bigint_is_404_json_and_touches_nothing(api, method, path) -> None:
    response = getattr(api, method)(path)
    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"


def test_control_the_largest_bigint_is_still_an_id() -> None:
    assert resolve(f"/v1/products/{BIGINT_MAX}").kwargs == {"product_id": BIGINT_MAX}
    with pytest.raises(Resolver404):
        resolve(f"/v1/products/{TOO_LARGE}")


def test_a_midtrans_notification_with_the_sandbox_gateway_is_refused_not_a_failure(client, settings) -> None:
    settings.PAYMENT_GATEWAY = "sandbox"
    response = client.post("/v1/payments/midtrans/notification", data="[null, null]", content_type="application/json")
    assert response.status_code == 401, response.content
    assert response.json()["code"] == "invalid_signature"
