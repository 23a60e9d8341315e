"""An order as the API shows it, and the order endpoints (a customer's own order, cancelling it). Here in payments,
not in orders: an order's JSON carries the link its customer pays at (:func:`payments.sessions.payment_url`), and
the checkout's 201 renders the same JSON. Thin: parse, call a selector or service, render."""

from typing import Any

from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.response import Response

from orders import schemas, selectors, services
from orders.exceptions import OrderNotFound
from orders.selectors import OrderView
from payments import sessions
from payments.sessions import payment_url
from skincare.api import authenticated_customer
from skincare.apiview import ApiView


def order_data(request: HttpRequest, order: OrderView) -> dict[str, Any]:
    """An order as every endpoint shows it (checkout's 201, a replayed 201, GET, cancel): its JSON and where to
    pay it."""
    return {**order.to_json(), "payment_url": payment_url(request, order)}


class OrderDetailApi(ApiView):
    @schemas.ORDER_DETAIL
    def get(self, request: Request, order_id: int) -> Response:
        order = selectors.order_get_for_customer(order_id=order_id, customer=authenticated_customer(request))
        if order is None:
            raise OrderNotFound(order_id=order_id)
        return Response(order_data(request, order))


class OrderCancelApi(ApiView):
    @schemas.ORDER_CANCEL
    def post(self, request: Request, order_id: int) -> Response:
        customer = authenticated_customer(request)
        services.order_cancel(order_id=order_id, customer=customer)
        sessions.session_close_after_cancel(order_id=order_id)  # committed: now the gateway, outside any transaction
        order = selectors.order_get_for_customer(order_id=order_id, customer=customer)
        if order is None:  # cancelled a moment ago, so only a concurrent deletion could get here
            raise OrderNotFound(order_id=order_id)
        return Response(order_data(request, order))
