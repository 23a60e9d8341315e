"""Browser middleware runs for browser pages and is skipped on the JSON API (skincare.middleware)."""

import pytest
from django.middleware.csrf import CsrfViewMiddleware

from skincare.middleware import browser_only, is_api_path

pytestmark = pytest.mark.django_db


def test_admin_pages_still_get_the_browser_middleware(client):
    response = client.get("/admin/login/")
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    assert "csrftoken" in response.cookies
    assert hasattr(response.wsgi_request, "session") and hasattr(response.wsgi_request, "user")


def test_api_requests_skip_it(client, make_product):
    product = make_product(stock=1)
    response = client.get(f"/v1/products/{product.pk}")
    assert response.status_code == 200
    assert "X-Frame-Options" not in response
    assert not hasattr(response.wsgi_request, "session")
    assert not response.cookies


def test_the_sandbox_page_is_a_browser_page():
    assert is_api_path("/v1/checkout") and is_api_path("/healthz")
    assert not is_api_path("/v1/payments/sandbox/1") and not is_api_path("/admin/")


def test_middleware_with_view_hooks_cannot_be_skipped_per_path():
    with pytest.raises(TypeError, match="process_view"):
        browser_only(CsrfViewMiddleware)
