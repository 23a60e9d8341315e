"""The API description: generated with warnings as errors and validated, served as JSON, Swagger UI without a CDN."""

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command

ENDPOINTS = {
    ("post", "/v1/products/{product_id}/queue"): {"200", "201", "401", "404", "409", "410", "500", "503"},
    ("get", "/v1/products/{product_id}/queue"): {"200", "401", "404", "500", "503"},
    ("get", "/v1/queue/passes/{pass_id}"): {"200", "401", "403", "404", "410", "500", "503"},
    ("post", "/v1/checkout"): {"201", "400", "401", "409", "410", "413", "415", "422", "429", "500", "503"},
    ("get", "/v1/orders/{order_id}"): {"200", "401", "404", "500", "503"},
    ("post", "/v1/orders/{order_id}/cancel"): {"200", "401", "404", "409", "500", "503"},
    ("post", "/v1/payments/webhook"): {"200", "400", "401", "404", "413", "415", "500", "503"},
    ("get", "/v1/payments/pay/{token}"): {"302", "404", "409", "500", "503"},
    ("post", "/v1/payments/midtrans/notification"): {"200", "400", "401", "404", "413", "500", "503"},
    ("post", "/v1/payments/xendit/notification"): {"200", "400", "401", "404", "413", "500", "503"},
    ("get", "/v1/products"): {"200", "500", "503"},
    ("get", "/v1/products/{product_id}"): {"200", "304", "404", "500", "503"},
    ("post", "/v1/carts"): {"201", "400", "401", "409", "413", "415", "422", "500", "503"},
    ("get", "/v1/carts/{cart_id}"): {"200", "401", "404", "410", "500", "503"},
    ("put", "/v1/carts/{cart_id}"): {"200", "400", "401", "404", "409", "410", "413", "415", "422", "500", "503"},
    ("post", "/v1/carts/{cart_id}/checkout"): {
        "201",
        "400",
        "401",
        "404",
        "409",
        "410",
        "413",
        "415",
        "422",
        "429",
        "500",
        "503",
    },
}


def test_schema_generates_without_warnings_and_validates(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    call_command(
        "spectacular",
        "--fail-on-warn",
        "--validate",
        "--format",
        "openapi-json",
        "--file",
        str(out),
        stderr=io.StringIO(),
    )
    schema = json.loads(out.read_text())
    described = {(m, p): set(op["responses"]) for p, ops in schema["paths"].items() for m, op in ops.items()}
    assert described == ENDPOINTS
    for (method, path), _codes in ENDPOINTS.items():
        operation = schema["paths"][path][method]
        for code, response in operation["responses"].items():
            if code.startswith(("4", "5")):  # every error answer has the error body (a 302 has none)
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/Error"), (method, path, code)
                assert "Codes:" in response["description"], (method, path, code)
    assert schema["paths"]["/v1/checkout"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    cart_codes = {
        code
        for operation in schema["paths"]["/v1/carts/{cart_id}/checkout"].values()
        for response in operation["responses"].values()
        for code in re.findall(r"`([a-z_]+)`", response["description"])
    }
    assert {"cart_not_found", "cart_expired", "cart_checked_out", "stock_conflict", "invalid_product"} <= cart_codes
    assert schema["components"]["securitySchemes"]["tokenAuth"] == {"type": "http", "scheme": "bearer"}


@pytest.mark.django_db
def test_schema_and_swagger_ui_are_served_without_any_cdn(client) -> None:  # type: ignore[no-untyped-def]
    schema = client.get("/v1/schema")
    assert schema.status_code == 200
    assert schema.json()["openapi"].startswith("3.")

    docs = client.get("/v1/docs")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    external = re.findall(r"""(?:src|href)=["'](https?://[^"']+)""", html)
    assert external == []


@pytest.mark.django_db
def test_the_schema_is_generated_once_per_process(client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from drf_spectacular.generators import SchemaGenerator

    from skincare.openapi import SchemaView

    generated = []
    original = SchemaGenerator.get_schema

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        generated.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counting)
    SchemaView.forget()
    first = client.get("/v1/schema")
    second = client.get("/v1/schema?version=other&lang=de")  # parameters cannot make it generate (or cache) another

    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    assert len(generated) == 1
