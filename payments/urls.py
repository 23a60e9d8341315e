from django.urls import path

from payments import sandbox
from payments.api import MidtransNotificationApi, PaymentPageApi, PaymentWebhookApi, XenditNotificationApi

urlpatterns = [
    path("payments/webhook", PaymentWebhookApi.as_view(), name="payment-webhook"),
    path("payments/sandbox/<str:token>", sandbox.sandbox_page, name="payment-sandbox"),
    path("payments/pay/<str:token>", PaymentPageApi.as_view(), name="payment-pay"),
    path("payments/midtrans/notification", MidtransNotificationApi.as_view(), name="midtrans-notification"),
    path("payments/xendit/notification", XenditNotificationApi.as_view(), name="xendit-notification"),
]
