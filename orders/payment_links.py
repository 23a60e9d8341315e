"""Where a pending order is paid: an extension point filled by a higher layer.

Orders must not import payments (dependencies point payments → orders → inventory), yet an order's JSON shows
the link its customer pays at. The payments app registers the function that builds that link from its
``AppConfig.ready()``; with nothing registered (or when the builder returns None) ``payment_url`` is null.
"""

from collections.abc import Callable

from django.http import HttpRequest

from orders.models import Order
from orders.selectors import OrderView

PaymentUrlBuilder = Callable[[HttpRequest, OrderView], str | None]

_builder: PaymentUrlBuilder | None = None


def register_payment_url_builder(builder: PaymentUrlBuilder | None) -> None:
    global _builder  # one process-wide hook, set once at start-up
    _builder = builder


def payment_url(request: HttpRequest, order: OrderView) -> str | None:
    if _builder is None or order.status != Order.Status.PENDING_PAYMENT:
        return None
    return _builder(request, order)
