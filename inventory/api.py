"""Product endpoints (public, no authentication). Thin: call a selector, render."""

import hashlib
from typing import Any

from django.conf import settings
from rest_framework.permissions import AllowAny

from inventory import schemas, selectors
from inventory.exceptions import ProductNotFound
from inventory.selectors import ProductView
from skincare.api import ApiRequest, ApiResponse
from skincare.apiview import ApiView


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


class PublicApiView(ApiView):
    """A public read: no authentication classes (the user is None), every request allowed."""

    authentication_classes = []
    permission_classes = [AllowAny]


class ProductListApi(PublicApiView):
    @schemas.PRODUCT_LIST
    def get(self, request: ApiRequest) -> ApiResponse:
        return ApiResponse({"products": [product_data(p) for p in selectors.product_list()]})


class ProductDetailApi(PublicApiView):
    @schemas.PRODUCT_DETAIL
    def get(self, request: ApiRequest, product_id: int) -> ApiResponse:
        product = selectors.product_get_recent(product_id=product_id)
        if product is None:
            raise ProductNotFound(product_id=product_id)
        data = product_data(product)
        # The ETag covers everything but seconds_to_start (a countdown, derivable from sale_starts_at): a proxy or a
        # CDN in front revalidates with If-None-Match and gets 304 until the stock or the sale changes.
        stable = {key: value for key, value in data.items() if key != "seconds_to_start"}
        etag = '"' + hashlib.sha256(repr(sorted(stable.items())).encode()).hexdigest()[:32] + '"'
        max_age = settings.PRODUCT_READ_MAX_AGE_SECONDS
        headers = {"ETag": etag, "Cache-Control": f"public, max-age={max_age}" if max_age else "no-cache"}
        if etag in request.headers.get("If-None-Match", "").replace("W/", "").split(", "):
            return ApiResponse(status=304, headers=headers)
        return ApiResponse(data, headers=headers)
