from django.urls import path

from payments import sandbox
from payments.api import CheckoutApi, PaymentWebhookApi

urlpatterns = [
    path("checkout", CheckoutApi.as_view(), name="checkout"),
    path("payments/webhook", PaymentWebhookApi.as_view(), name="payment-webhook"),
    path("payments/sandbox/<str:token>", sandbox.sandbox_page, name="payment-sandbox"),
]
