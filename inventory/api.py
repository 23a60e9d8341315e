"""Product endpoints (public, no authentication). Thin: call a selector, render."""

from typing import Any

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory import schemas, selectors
from inventory.exceptions import ProductNotFound
from inventory.selectors import ProductView


def product_data(product: ProductView) -> dict[str, Any]:
    return {
        "id": product.id,
        "sku": product.sku,
        "name": product.name,
        "price": str(product.price),
        "max_per_customer": product.max_per_customer,
        "available_stock": product.available_stock,
        # What a shopper needs only: the inventory strategy and the bucket count are ops internals (the admin).
        # The sale window, and its state by the database clock (a client's clock is not trusted for it).
        "sale_price": None if product.sale_price is None else str(product.sale_price),
        "sale_starts_at": product.sale_starts_at,
        "sale_ends_at": product.sale_ends_at,
        "sale": product.sale,
        "seconds_to_start": None if product.seconds_to_start is None else round(float(product.seconds_to_start), 3),
    }


class PublicApiView(APIView):
    """A public read: no authentication classes, so DRF's per-request authentication step has nothing to evaluate
    and is skipped (``request.user`` stays lazy, DRF's documented way; the view never reads it). The OpenAPI
    description is unchanged: it is built from these same two attributes."""

    authentication_classes = []
    permission_classes = [AllowAny]

    def perform_authentication(self, request: Request) -> None:
        pass


class ProductListApi(PublicApiView):
    @schemas.PRODUCT_LIST
    def get(self, request: Request) -> Response:
        return Response({"products": [product_data(p) for p in selectors.product_list()]})


class ProductDetailApi(PublicApiView):
    @schemas.PRODUCT_DETAIL
    def get(self, request: Request, product_id: int) -> Response:
        product = selectors.product_get(product_id=product_id)
        if product is None:
            raise ProductNotFound(product_id=product_id)
        return Response(product_data(product))
