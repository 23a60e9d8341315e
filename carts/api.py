"""Cart endpoints: create, read, replace (checking a cart out is the checkout's: ``checkout.api``). Thin: parse, call a selector or service, render."""

import uuid
from decimal import Decimal
from typing import Any

from django.conf import settings

from carts import schemas, selectors, services
from carts.exceptions import CartExpired, CartNotFound
from carts.models import Cart
from carts.selectors import CartView
from skincare import validation
from skincare.api import ApiRequest, ApiResponse, authenticated_customer
from skincare.apiview import ApiView
from skincare.timestamps import utc_z


def parse_cart_id(raw: str) -> uuid.UUID:
    """The cart id of the URL; anything that is not a UUID names no cart (404, like a missing one)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise CartNotFound(cart_id=raw[:64]) from None


def cart_data(cart: CartView) -> dict[str, Any]:
    total = sum((line.unit_price * line.qty for line in cart.lines if line.unit_price is not None), Decimal(0))
    return {
        "cart_id": str(cart.cart_id),
        "status": cart.status,
        "expires_at": utc_z(cart.expires_at),
        "order_id": cart.order_id,
        "total": str(total),
        "items": [
            {
                "product_id": line.product_id,
                "qty": line.qty,
                "unit_price": None if line.unit_price is None else str(line.unit_price),
                "for_sale": line.for_sale,
                "available_stock": line.available_stock,
                "in_stock": line.in_stock,
                "sale": line.sale,
            }
            for line in cart.lines
        ],
    }


def cart_items(request: ApiRequest) -> list[tuple[int, int]]:
    """The body of a create or replace: exactly the checkout's ``{"items": [...]}`` (shape and types, else 400)."""
    return validation.checkout_items(request.data, max_items=settings.CHECKOUT_MAX_ITEMS)


class CartCreateApi(ApiView):
    @schemas.CART_CREATE
    def post(self, request: ApiRequest) -> ApiResponse:
        cart = services.cart_create(customer=authenticated_customer(request), items=cart_items(request))
        return ApiResponse(cart_data(cart), status=201)


class CartDetailApi(ApiView):
    @schemas.CART_DETAIL
    def get(self, request: ApiRequest, cart_id: str) -> ApiResponse:
        parsed = parse_cart_id(cart_id)
        cart = selectors.cart_get_for_customer(cart_id=parsed, customer=authenticated_customer(request))
        if cart is None:
            raise CartNotFound(cart_id=str(parsed))
        if cart.status == Cart.Status.OPEN and cart.expired:
            raise CartExpired(cart_id=str(parsed))
        return ApiResponse(cart_data(cart))

    @schemas.CART_REPLACE
    def put(self, request: ApiRequest, cart_id: str) -> ApiResponse:
        parsed = parse_cart_id(cart_id)
        items = cart_items(request)
        cart = services.cart_replace(customer=authenticated_customer(request), cart_id=parsed, items=items)
        return ApiResponse(cart_data(cart))
