from django.urls import path

from inventory.api import ProductDetailApi, ProductListApi

urlpatterns = [
    path("products", ProductListApi.as_view(), name="product-list"),
    path("products/<id:product_id>", ProductDetailApi.as_view(), name="product-detail"),
]
