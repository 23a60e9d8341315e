"""Request ids, one JSON access line per request, and the slow-transaction warning."""

import json
import logging

import pytest
from django.test import Client

from skincare import logs


@pytest.mark.django_db
def test_a_sane_client_request_id_is_kept_and_echoed(api, make_product, caplog) -> None:  # type: ignore[no-untyped-def]
    product = make_product(stock=3)
    caplog.set_level(logging.INFO, logger="skincare.access")

    response = api.post(
        "/v1/checkout",
        {"items": [{"product_id": product.pk, "qty": 1}]},
        format="json",
        HTTP_X_REQUEST_ID="client-id_1.2-3",
    )

    assert response.status_code == 201
    assert response["X-Request-ID"] == "client-id_1.2-3"
    [line] = [r for r in caplog.records if r.name == "skincare.access"]
    assert line.request_id == "client-id_1.2-3"
    assert (line.method, line.path, line.status) == ("POST", "/v1/checkout", 201)
    assert line.customer_id == api.customer.pk
    assert line.order_id == response.json()["order_id"]
    assert line.duration_ms > 0


@pytest.mark.parametrize("given", ["has space", "x" * 201, "ünïcode", "semi;colon", ""])
@pytest.mark.django_db
def test_an_insane_request_id_is_replaced(given: str, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="skincare.access")
    response = Client().get("/v1/products", HTTP_X_REQUEST_ID=given)
    made = response["X-Request-ID"]
    assert made != given
    assert logs.is_sane_request_id(made)
    assert [r.request_id for r in caplog.records if r.name == "skincare.access"] == [made]


@pytest.mark.django_db
def test_order_id_comes_from_the_url(api, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="skincare.access")
    api.get("/v1/orders/424242")
    [line] = [r for r in caplog.records if r.name == "skincare.access"]
    assert (line.status, line.order_id, line.customer_id) == (404, 424242, api.customer.pk)


@pytest.mark.django_db
def test_access_log_can_be_turned_off(settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.ACCESS_LOG = False
    caplog.set_level(logging.INFO, logger="skincare.access")
    response = Client().get("/healthz")
    assert response["X-Request-ID"]
    assert [r for r in caplog.records if r.name == "skincare.access"] == []


def test_json_formatter_writes_one_object_per_line_with_the_request_id() -> None:
    config = logs.logging_config(log_format="json", level="INFO")
    formatter_config = dict(config["formatters"]["main"])  # type: ignore[index]
    factory = formatter_config.pop("()")
    module, _, name = factory.rpartition(".")
    formatter = getattr(__import__(module, fromlist=[name]), name)(**formatter_config)
    record = logging.LogRecord("skincare.access", logging.INFO, __file__, 1, "GET %s", ("/x",), None)
    record.status = 200
    token = logs.request_id_var.set("abc-123")
    try:
        logs.RequestIdFilter().filter(record)
    finally:
        logs.request_id_var.reset(token)
    line = formatter.format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "GET /x"
    assert parsed["request_id"] == "abc-123"
    assert parsed["level"] == "INFO"
    assert parsed["logger"] == "skincare.access"
    assert parsed["status"] == 200


@pytest.mark.django_db
def test_slow_service_transactions_are_logged_as_warnings(api, make_product, settings, caplog) -> None:  # type: ignore[no-untyped-def]
    settings.DB_SLOW_TRANSACTION_MS = 0
    product = make_product(stock=3)
    caplog.set_level(logging.WARNING, logger="skincare.db.slow")

    api.post("/v1/checkout", {"items": [{"product_id": product.pk, "qty": 1}]}, format="json")

    [warning] = [r for r in caplog.records if r.name == "skincare.db.slow"]
    assert warning.levelno == logging.WARNING
    assert warning.transaction == "_place"  # the service transaction retry_transient runs
    assert warning.duration_ms >= 0
