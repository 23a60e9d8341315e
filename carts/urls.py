from django.urls import path

from carts.api import CartCreateApi, CartDetailApi

urlpatterns = [
    path("carts", CartCreateApi.as_view(), name="cart-create"),
    path("carts/<str:cart_id>", CartDetailApi.as_view(), name="cart-detail"),
]
