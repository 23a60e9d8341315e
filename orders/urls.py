from django.urls import path

from orders.api import OrderCancelApi, OrderDetailApi

urlpatterns = [
    path("orders/<int:order_id>", OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<int:order_id>/cancel", OrderCancelApi.as_view(), name="order-cancel"),
]
