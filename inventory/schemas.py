"""OpenAPI descriptions of the product endpoints; applied to the views in inventory/api.py."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from skincare.openapi import INTERNAL, UNAVAILABLE, error


class ProductSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    sku = serializers.CharField()
    name = serializers.CharField()
    price = serializers.DecimalField(max_digits=12, decimal_places=2, coerce_to_string=True)
    available_stock = serializers.IntegerField(help_text="A snapshot; checkout decides under lock.")
    max_per_customer = serializers.IntegerField(
        allow_null=True, help_text="Units one customer may hold (pending + paid); null = no limit."
    )
    sale_price = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        coerce_to_string=True,
        allow_null=True,
        help_text="Unit price inside the sale window; null = the regular price.",
    )
    sale_starts_at = serializers.DateTimeField(allow_null=True, help_text="Checkouts open at this time; null = open.")
    sale_ends_at = serializers.DateTimeField(allow_null=True, help_text="Checkouts close at this time; null = never.")
    sale = serializers.ChoiceField(
        choices=["scheduled", "open", "ended"],
        allow_null=True,
        help_text="The sale window's state by the database clock; null when the product has no window. Before it, "
        "checkout answers 409 sale_not_started; after it, 410 sale_ended.",
    )
    seconds_to_start = serializers.FloatField(
        allow_null=True,
        help_text="Seconds until the sale opens by the database clock (scheduled only; to the millisecond). "
        "Count down from this, not from your own clock.",
    )


class ProductListSerializer(serializers.Serializer):
    products = ProductSerializer(many=True)


PRODUCT_LIST = extend_schema(
    operation_id="product_list",
    summary="Products for sale (public)",
    auth=[],
    responses={200: ProductListSerializer, 500: INTERNAL, 503: UNAVAILABLE},
    tags=["catalogue"],
)

PRODUCT_DETAIL = extend_schema(
    operation_id="product_detail",
    summary="One product (public)",
    auth=[],
    parameters=[
        OpenApiParameter(
            "If-None-Match",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            required=False,
            description="The ETag of an earlier answer: 304 while the product has not changed.",
        )
    ],
    responses={
        200: ProductSerializer,
        304: OpenApiResponse(description="Not modified: the answer with this ETag is still current."),
        404: error("No such product, or not for sale.", "product_not_found"),
        500: INTERNAL,
        503: UNAVAILABLE,
    },
    tags=["catalogue"],
)
