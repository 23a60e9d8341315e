"""OpenAPI descriptions of the cart endpoints; applied to the views in carts/api.py."""

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from payments.schemas import CHECKOUT_RESPONSES, IDEMPOTENCY_KEY, CheckoutRequestSerializer
from skincare.openapi import BUSY, INTERNAL, UNAUTHORIZED, UNAVAILABLE, error


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

CART_CHECKOUT = extend_schema(
    operation_id="cart_checkout",
    summary="Check out your cart: reserve its stock and open a pending order, at most once",
    description=(
        "No body. The same answers as `POST /v1/checkout` (same 201 body, same refusals), plus the cart's own: a "
        "cart becomes an order at most once, however many checkouts of it race."
    ),
    parameters=[CART_ID, IDEMPOTENCY_KEY],
    request=None,
    responses={
        **CHECKOUT_RESPONSES,
        400: error("The Idempotency-Key is malformed.", "invalid_request"),
        404: NOT_FOUND,
        409: error(
            "The cart was already checked out (`cart_checked_out`, with `order_id`), or any 409 of /v1/checkout: "
            "not enough stock (refresh your cart), `lock_busy`, a per-customer limit, a key in progress, a product's "
            "sale window not open yet (`sale_not_started`, with Retry-After; the cart stays open), no admission to a "
            "queued product (`admission_required`; the cart stays open).",
            "cart_checked_out",
            "stock_conflict",
            "lock_busy",
            "purchase_limit_exceeded",
            "too_many_pending_orders",
            "idempotency_key_in_progress",
            "sale_not_started",
            "admission_required",
        ),
        410: error(
            "The cart was not changed for CART_TTL_SECONDS (`cart_expired`: rebuild it), a product's sale window "
            "has closed (`sale_ended`), or the admission to a queued product lapsed (`admission_expired`). Nothing "
            "was changed.",
            "cart_expired",
            "sale_ended",
            "admission_expired",
        ),
    },
    tags=["carts"],
)
