from django.urls import path

from payments import sandbox
from payments.api import CheckoutApi, MidtransNotificationApi, PaymentPageApi, PaymentWebhookApi
from payments.order_api import OrderCancelApi, OrderDetailApi

urlpatterns = [
    path("checkout", CheckoutApi.as_view(), name="checkout"),
    path("orders/<id:order_id>", OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<id:order_id>/cancel", OrderCancelApi.as_view(), name="order-cancel"),
    path("payments/webhook", PaymentWebhookApi.as_view(), name="payment-webhook"),
    path("payments/sandbox/<str:token>", sandbox.sandbox_page, name="payment-sandbox"),
    path("payments/pay/<str:token>", PaymentPageApi.as_view(), name="payment-pay"),
    path("payments/midtrans/notification", MidtransNotificationApi.as_view(), name="midtrans-notification"),
]
