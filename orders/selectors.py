"""Orders' reads. An order leaves this layer as an :class:`OrderView`: a plain value the API renders, that checkout
also returns for the order it just placed and that an idempotent checkout stores and replays."""

import dataclasses
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Count, Min, Prefetch

from orders.models import Order, OrderLine
from skincare.db import TransactionNow
from skincare.timestamps import utc_z


@dataclasses.dataclass(frozen=True)
class OrderLineView:
    product_id: int
    qty: int
    unit_price: Decimal


@dataclasses.dataclass(frozen=True)
class OrderView:
    order_id: int
    customer_id: int
    status: str
    cancel_reason: str | None
    payment_expires_at: datetime | None
    total: Decimal
    lines: tuple[OrderLineView, ...]
    # Last, with the shop's currency as default: checkout builds its view from the values it wrote.
    currency: str = dataclasses.field(default_factory=lambda: settings.SHOP_CURRENCY)

    @classmethod
    def of(cls, order: Order, lines: list[OrderLine]) -> "OrderView":
        return cls(
            order_id=order.pk,
            customer_id=order.customer_id,
            status=order.status,
            cancel_reason=order.cancel_reason,
            payment_expires_at=order.payment_expires_at,
            total=order.total,
            lines=tuple(OrderLineView(line.product_id, line.qty, line.unit_price) for line in lines),
            currency=order.currency,
        )

    def to_json(self) -> dict[str, Any]:
        """The order's JSON, as every endpoint shows it (``orders.api.order_data`` adds the ``payment_url``) and as
        an idempotent checkout stores it (scoped to the customer); :meth:`from_json` reads it back."""
        return {
            "order_id": self.order_id,
            "status": self.status,
            "cancel_reason": self.cancel_reason,
            "payment_expires_at": utc_z(self.payment_expires_at) if self.payment_expires_at else None,
            "total": str(self.total),
            "currency": self.currency,
            "items": [
                {"product_id": line.product_id, "qty": line.qty, "unit_price": str(line.unit_price)}
                for line in self.lines
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, customer_id: int) -> "OrderView":
        expires = data["payment_expires_at"]
        return cls(
            order_id=data["order_id"],
            customer_id=customer_id,
            status=data["status"],
            cancel_reason=data["cancel_reason"],
            payment_expires_at=datetime.fromisoformat(expires) if expires else None,
            total=Decimal(data["total"]),
            currency=data.get("currency", settings.SHOP_CURRENCY),  # answers stored before orders had a currency
            lines=tuple(
                OrderLineView(item["product_id"], item["qty"], Decimal(item["unit_price"])) for item in data["items"]
            ),
        )


def order_get_for_customer(*, order_id: int, customer: User) -> OrderView | None:
    """The customer's own order with its lines, or None (someone else's order looks exactly like a missing one)."""
    order = (
        Order.objects.filter(pk=order_id, customer=customer)
        .prefetch_related(Prefetch("lines", queryset=OrderLine.objects.order_by("product_id")))
        .first()
    )
    return None if order is None else OrderView.of(order, list(order.lines.all()))


def overdue_summary() -> dict[str, Any]:
    """How much due work is waiting, by the database clock (for the sweeper's report)."""
    return Order.objects.filter(
        status=Order.Status.PENDING_PAYMENT, payment_expires_at__lte=TransactionNow()
    ).aggregate(count=Count("pk"), oldest=Min("payment_expires_at"))
