"""Product endpoints (public, no authentication). Thin: call a selector, render."""

from typing import Any

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory import selectors
from inventory.exceptions import ProductNotFound
from inventory.models import Product


def product_data(product: Product) -> dict[str, Any]:
    inventory = getattr(product, "inventory", None)
    return {
        "id": product.pk,
        "sku": product.sku,
        "name": product.name,
        "price": str(product.price),
        "available_stock": inventory.available_stock if inventory else 0,
    }


class ProductListApi(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        return Response({"products": [product_data(p) for p in selectors.product_list()]})


class ProductDetailApi(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request: Request, product_id: int) -> Response:
        product = selectors.product_get(product_id=product_id)
        if product is None:
            raise ProductNotFound(product_id=product_id)
        return Response(product_data(product))
