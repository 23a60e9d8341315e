from django.urls import path

from checkout.api import CartCheckoutApi, CheckoutApi, OrderCancelApi, OrderDetailApi

urlpatterns = [
    path("checkout", CheckoutApi.as_view(), name="checkout"),
    path("carts/<str:cart_id>/checkout", CartCheckoutApi.as_view(), name="cart-checkout"),
    path("orders/<id:order_id>", OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<id:order_id>/cancel", OrderCancelApi.as_view(), name="order-cancel"),
]
