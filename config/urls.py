"""The root URLconf: each app owns its routes (``<app>/urls.py``) and is included here under ``/v1/``."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerView

from skincare import health
from skincare.openapi import SchemaView

handler400 = "skincare.api.bad_request"
handler403 = "skincare.api.permission_denied"
handler404 = "skincare.api.not_found"
handler500 = "skincare.api.server_error"

urlpatterns = [
    path("v1/", include("waitingroom.urls")),  # first: a poll is the most frequent request of a queued sale
    path("v1/", include("inventory.urls")),
    path("v1/", include("checkout.urls")),
    path("v1/", include("payments.urls")),
    path("v1/", include("carts.urls")),
    path("v1/schema", SchemaView.as_view(), name="schema"),
    path("v1/docs", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("", include("backoffice.urls")),  # /metrics and the sale board (before the admin's catch-all)
    path("admin/", admin.site.urls),
]
