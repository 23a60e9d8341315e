from typing import Any

from django.contrib.auth.models import User
from django.db.models import Count, Min, Prefetch

from orders.models import Order, OrderLine
from skincare.db import TransactionNow


def order_get_for_customer(*, order_id: int, customer: User) -> Order | None:
    """The customer's own order with its lines, or None (someone else's order looks exactly like a missing one)."""
    return (
        Order.objects.filter(pk=order_id, customer=customer)
        .prefetch_related(Prefetch("lines", queryset=OrderLine.objects.order_by("product_id")))
        .first()
    )


def overdue_summary() -> dict[str, Any]:
    """How much due work is waiting, by the database clock (for the sweeper's report)."""
    return Order.objects.filter(
        status=Order.Status.PENDING_PAYMENT, payment_expires_at__lte=TransactionNow()
    ).aggregate(count=Count("pk"), oldest=Min("payment_expires_at"))
