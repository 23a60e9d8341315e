"""OpenAPI descriptions of the cart endpoints; applied to the views in carts/api.py."""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from skincare import validation
from skincare.openapi import BUSY, INTERNAL, UNAUTHORIZED, UNAVAILABLE, error


# The items body of a cart and of a checkout (checkout.schemas states it for POST /v1/checkout).
class CheckoutItemSerializer(serializers.Serializer):
    product_id = serializers.IntegerField(min_value=1, max_value=validation.BIGINT_MAX)
    qty = serializers.IntegerField(
        min_value=1,
        max_value=settings.CHECKOUT_MAX_QTY,
        help_text="At most CHECKOUT_MAX_QTY units of one product per order (the lines of one product added up).",
    )


class CheckoutRequestSerializer(serializers.Serializer):
    items = serializers.ListField(
        child=CheckoutItemSerializer(),
        min_length=1,
        max_length=settings.CHECKOUT_MAX_ITEMS,
        help_text="1 to CHECKOUT_MAX_ITEMS lines.",
    )


class CartLineSerializer(serializers.Serializer):
    product_id = serializers.IntegerField()
    qty = serializers.IntegerField()
    unit_price = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        coerce_to_string=True,
        allow_null=True,
        help_text="Current price; null when the product is no longer for sale.",
    )
    for_sale = serializers.BooleanField()
    available_stock = serializers.IntegerField(help_text="Units on sale right now (not reserved for this cart).")
    in_stock = serializers.BooleanField(help_text="For sale and at least `qty` units available right now.")
    sale = serializers.ChoiceField(
        choices=["scheduled", "open", "ended"],
        allow_null=True,
        help_text="The product's sale window by the database clock (null: no window); `unit_price` is the sale price "
        "while it is open.",
    )


class CartSerializer(serializers.Serializer):
    cart_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=["open", "checked_out"])
    expires_at = serializers.DateTimeField(
        help_text="now() + CART_TTL_SECONDS at the last change, by the database clock (UTC)."
    )
    order_id = serializers.IntegerField(allow_null=True, help_text="The order this cart became; null while open.")
    total = serializers.DecimalField(max_digits=12, decimal_places=2, coerce_to_string=True)
    items = CartLineSerializer(many=True)


CART_ID = OpenApiParameter("cart_id", str, OpenApiParameter.PATH, description="The cart's id (a UUID).")
NOT_FOUND = error("No such cart, or not yours (the two look the same).", "cart_not_found")
EXPIRED = error(
    "The cart was not changed for CART_TTL_SECONDS: rebuild it (POST /v1/carts). Nothing was changed.", "cart_expired"
)
CHECKED_OUT = error("The cart was already checked out; `order_id` names its order.", "cart_checked_out")
ITEMS_400 = error(
    "The body is not valid JSON or not a valid list of items, or more than CHECKOUT_MAX_QTY units of one product.",
    "invalid_request",
    "malformed_json",
)
ITEMS_422 = error("A product does not exist or is not for sale (`product_ids` lists them).", "invalid_product")

CART_CREATE = extend_schema(
    operation_id="cart_create",
    summary="Create a cart (holds no stock)",
    description=(
        "Validated exactly as a checkout is; stock is reserved only when the cart is checked out. The cart expires "
        "CART_TTL_SECONDS (default 1800) after its last change."
    ),
    request=CheckoutRequestSerializer,
    responses={
        201: OpenApiResponse(CartSerializer, description="Cart created."),
        400: ITEMS_400,
        401: UNAUTHORIZED,
        409: error(
            "The customer already has MAX_OPEN_CARTS_PER_CUSTOMER (default 10) open carts (`max_open_carts`).",
            "too_many_open_carts",
        ),
        413: error("The body is larger than REQUEST_MAX_BODY_BYTES.", "payload_too_large"),
        415: error("The body is not `application/json`.", "unsupported_media_type"),
        422: ITEMS_422,
        500: INTERNAL,
        503: BUSY,
    },
    tags=["carts"],
)

CART_DETAIL = extend_schema(
    operation_id="cart_detail",
    summary="One of your carts, with current prices and availability",
    parameters=[CART_ID],
    responses={
        200: OpenApiResponse(CartSerializer, description="Open (or checked out: `order_id` names the order)."),
        401: UNAUTHORIZED,
        404: NOT_FOUND,
        410: EXPIRED,
        500: INTERNAL,
        503: UNAVAILABLE,
    },
    tags=["carts"],
)

CART_REPLACE = extend_schema(
    operation_id="cart_replace",
    summary="Replace the items of your open cart (moves its expiry)",
    parameters=[CART_ID],
    request=CheckoutRequestSerializer,
    responses={
        200: OpenApiResponse(CartSerializer, description="Items replaced; `expires_at` moved."),
        400: ITEMS_400,
        401: UNAUTHORIZED,
        404: NOT_FOUND,
        409: CHECKED_OUT,
        410: EXPIRED,
        413: error("The body is larger than REQUEST_MAX_BODY_BYTES.", "payload_too_large"),
        415: error("The body is not `application/json`.", "unsupported_media_type"),
        422: ITEMS_422,
        500: INTERNAL,
        503: BUSY,
    },
    tags=["carts"],
)
