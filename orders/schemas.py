"""OpenAPI descriptions of the order endpoints; applied to the views in payments/order_api.py."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers

from skincare.openapi import BUSY, INTERNAL, UNAUTHORIZED, UNAVAILABLE, error


class OrderLineSerializer(serializers.Serializer):
    product_id = serializers.IntegerField()
    qty = serializers.IntegerField()
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=2, coerce_to_string=True)


class OrderSerializer(serializers.Serializer):
    order_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["pending_payment", "paid", "cancelled"])
    cancel_reason = serializers.ChoiceField(
        choices=["payment_timeout", "customer_cancelled", "ops_cancelled"], allow_null=True, allow_blank=True
    )
    payment_expires_at = serializers.DateTimeField(help_text="Deadline by the database clock (UTC).")
    total = serializers.DecimalField(max_digits=12, decimal_places=2, coerce_to_string=True)
    currency = serializers.CharField(
        help_text="ISO 4217 code of the shop's currency (SHOP_CURRENCY); the amount a "
        "payment event must match is `total` in this currency."
    )
    items = OrderLineSerializer(many=True)
    payment_url = serializers.URLField(allow_null=True, help_text="Where to pay (the sandbox page in development).")


NOT_YOURS = error("No such order, or not yours (the two look the same).", "order_not_found")

ORDER_DETAIL = extend_schema(
    operation_id="order_detail",
    summary="One of your orders",
    responses={200: OrderSerializer, 401: UNAUTHORIZED, 404: NOT_YOURS, 500: INTERNAL, 503: UNAVAILABLE},
    tags=["orders"],
)

ORDER_CANCEL = extend_schema(
    operation_id="order_cancel",
    summary="Cancel your pending order and release its stock",
    request=None,
    responses={
        200: OpenApiResponse(OrderSerializer, description="Cancelled (customer_cancelled); units returned."),
        401: UNAUTHORIZED,
        404: NOT_YOURS,
        409: error("The order is already paid or cancelled.", "order_not_pending"),
        500: INTERNAL,
        503: BUSY,
    },
    tags=["orders"],
)
