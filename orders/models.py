from django.conf import settings
from django.db import models
from django.db.models import Q

from inventory.models import Product


class OrderStatus(models.TextChoices):
    PENDING_PAYMENT = "pending_payment", "Pending payment"
    PAID = "paid", "Paid"
    CANCELLED = "cancelled", "Cancelled"


class OrderCancelReason(models.TextChoices):
    PAYMENT_TIMEOUT = "payment_timeout", "Payment timed out"
    CUSTOMER_CANCELLED = "customer_cancelled", "Cancelled by the customer"
    OPS_CANCELLED = "ops_cancelled", "Cancelled by staff"


class Order(models.Model):
    Status = OrderStatus
    CancelReason = OrderCancelReason

    # db_index=False on a foreign key here and below: an index below (or a unique constraint) leads with the column,
    # and every index is one more write per checkout.
    customer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders", db_index=False
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING_PAYMENT)
    payment_expires_at = models.DateTimeField(null=True, blank=True)
    # NULL while the order is not cancelled, as in the seed schema.
    cancel_reason = models.CharField(max_length=40, choices=CancelReason.choices, null=True, blank=True)  # noqa: DJ001
    total = models.DecimalField(max_digits=12, decimal_places=2)
    # The shop's currency when the order was written (settings.SHOP_CURRENCY, written by checkout's ORDER_SQL); a
    # payment event in another currency never pays it. The database default is for the seed's reference SQL
    # (bench/scripts.py), which writes orders without naming one, and for the orders written before this column.
    currency = models.CharField(max_length=3, db_default="IDR")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "orders"
        ordering = ["-id"]
        indexes = [
            # The sweeper's claim query: pending orders whose payment window has closed.
            models.Index(
                fields=["payment_expires_at"],
                name="orders_pending_expiry_idx",
                condition=Q(status=OrderStatus.PENDING_PAYMENT),
            ),
            models.Index(fields=["customer", "-id"], name="orders_customer_idx"),
            # Checkout's cap on a customer's unpaid orders counts these.
            models.Index(
                fields=["customer", "payment_expires_at"],
                name="orders_customer_pending_idx",
                condition=Q(status="pending_payment"),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=OrderStatus.values), name="orders_status_valid"),
            models.CheckConstraint(
                condition=Q(status=OrderStatus.CANCELLED, cancel_reason__isnull=False)
                | ~Q(status=OrderStatus.CANCELLED),
                name="orders_cancelled_has_reason",
            ),
            models.CheckConstraint(condition=Q(total__gte=0), name="orders_total_gte_0"),
            models.CheckConstraint(condition=Q(currency__regex=r"^[A-Z]{3}$"), name="orders_currency_iso_4217"),
        ]

    def __str__(self):
        return f"order #{self.pk} ({self.status})"


class OrderLine(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines", db_index=False)
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="+")
    qty = models.IntegerField()
    unit_price = models.DecimalField(max_digits=12, decimal_places=2)

    class Meta:
        db_table = "order_lines"
        ordering = ["order_id", "product_id"]
        constraints = [
            models.UniqueConstraint(fields=["order", "product"], name="order_lines_order_product_uniq"),
            models.CheckConstraint(condition=Q(qty__gt=0), name="order_lines_qty_gt_0"),
        ]

    def __str__(self):
        return f"{self.qty} x product {self.product_id}"


class ReservationStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    CONSUMED = "consumed", "Consumed"
    EXPIRED = "expired", "Expired"
    CANCELLED = "cancelled", "Cancelled"


class Reservation(models.Model):
    """Units of one product held for one order until ``expires_at`` (database clock), in the stock row ``bucket``
    names. ``active`` ends in exactly one of ``consumed``, ``expired`` or ``cancelled``; nothing returns to
    ``active``."""

    Status = ReservationStatus

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="reservations", db_index=False)
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="reservations", db_index=False)
    qty = models.IntegerField()
    # The stock row (StockBucket.bucket) that holds the units: what release, cancel, expiry and payment take them
    # from. Written by the checkout's statements (bucket 0, then the bucket the reserve statement took:
    # inventory.reserve), never changed after COMMIT. A trigger (migration 0003) refuses a bucket the product has no
    # stock row for.
    bucket = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ACTIVE)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "inventory_reservations"
        ordering = ["order_id", "product_id"]
        indexes = [
            models.Index(
                fields=["expires_at"],
                name="inventory_res_expiry_active",
                condition=Q(status=ReservationStatus.ACTIVE),
            ),
            models.Index(fields=["product", "status"], name="inventory_res_product_status"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["order", "product"], name="inventory_reservations_order_product_uniq"),
            models.CheckConstraint(condition=Q(qty__gt=0), name="inventory_reservations_qty_gt_0"),
            models.CheckConstraint(
                condition=Q(status__in=ReservationStatus.values),
                name="inventory_reservations_status_valid",
            ),
        ]

    def __str__(self):
        return f"{self.qty} x product {self.product_id} for order {self.order_id} ({self.status})"
