from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from inventory import selectors
from skincare.api import error_body


def product_data(product):
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

    def get(self, request):
        return Response({"products": [product_data(p) for p in selectors.product_list()]})


class ProductDetailApi(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request, product_id):
        product = selectors.product_get(product_id=product_id)
        if product is None:
            return Response(error_body("Product not found.", "product_not_found"), status=404)
        return Response(product_data(product))
