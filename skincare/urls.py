from django.contrib import admin
from django.urls import include, path

from inventory.api import ProductDetailApi, ProductListApi
from orders.api import OrderCancelApi, OrderDetailApi
from payments.api import CheckoutApi, PaymentWebhookApi
from skincare import health

handler404 = "skincare.api.not_found"
handler500 = "skincare.api.server_error"

api_v1 = [
    path("checkout", CheckoutApi.as_view(), name="checkout"),
    path("products", ProductListApi.as_view(), name="product-list"),
    path("products/<int:product_id>", ProductDetailApi.as_view(), name="product-detail"),
    path("orders/<int:order_id>", OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<int:order_id>/cancel", OrderCancelApi.as_view(), name="order-cancel"),
    path("payments/webhook", PaymentWebhookApi.as_view(), name="payment-webhook"),
    path("payments/", include("payments.urls")),
]

urlpatterns = [
    path("v1/", include(api_v1)),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
]
