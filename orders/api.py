from django.conf import settings
from django.urls import reverse
from rest_framework.response import Response
from rest_framework.views import APIView

from orders import selectors, services
from orders.exceptions import OrderNotFound


def payment_url(request, order):
    if not settings.PAYMENT_SANDBOX:
        return None
    path = reverse("payments:sandbox", args=[order.pk])
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL.rstrip("/") + path
    return request.build_absolute_uri(path)


def order_data(request, order, lines):
    return {
        "order_id": order.pk,
        "status": order.status,
        "cancel_reason": order.cancel_reason,
        "payment_expires_at": order.payment_expires_at.isoformat().replace("+00:00", "Z"),
        "total": str(order.total),
        "items": [
            {"product_id": line.product_id, "qty": line.qty, "unit_price": str(line.unit_price)} for line in lines
        ],
        "payment_url": payment_url(request, order) if order.status == order.Status.PENDING_PAYMENT else None,
    }


class OrderDetailApi(APIView):
    def get(self, request, order_id):
        order = selectors.order_get_for_customer(order_id=order_id, customer=request.user)
        if order is None:
            raise OrderNotFound(order_id=order_id)
        return Response(order_data(request, order, order.lines.all()))


class OrderCancelApi(APIView):
    def post(self, request, order_id):
        services.order_cancel(order_id=order_id, customer=request.user)
        order = selectors.order_get_for_customer(order_id=order_id, customer=request.user)
        return Response(order_data(request, order, order.lines.all()))
