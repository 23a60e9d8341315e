import uuid

from django.conf import settings
from django.db import models

from inventory.models import Product
from orders.models import Order


class CartStatus(models.TextChoices):
    OPEN = "open", "Open"
    CHECKED_OUT = "checked_out", "Checked out"


class Cart(models.Model):
    """A customer's server-side cart. It holds no stock: units are reserved only when it is checked out.

    The id is a random UUID (122 random bits), never a sequence: another customer's cart must look exactly like a
    missing one, and a guessable id would invite probing. ``expires_at`` is set by the database clock to
    ``now() + CART_TTL_SECONDS`` on every change; ``order`` is the order the cart became (NULL while open).
    """

    Status = CartStatus

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="carts")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    expires_at = models.DateTimeField()
    order = models.ForeignKey(Order, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "carts"
        indexes = [
            # Pruning: open carts long past their expiry, checked-out carts long past their checkout.
            models.Index(fields=["expires_at"], name="carts_expires_at_idx"),
            models.Index(fields=["updated_at"], name="carts_checked_out_idx", condition=models.Q(status="checked_out")),
        ]

    def __str__(self) -> str:
        return f"cart {self.pk} ({self.status})"


class CartItem(models.Model):
    cart = models.ForeignKey(Cart, on_delete=models.CASCADE, related_name="items")
    product = models.ForeignKey(Product, on_delete=models.CASCADE, related_name="+")
    qty = models.PositiveIntegerField()

    class Meta:
        db_table = "cart_items"
        constraints = [
            models.UniqueConstraint(fields=["cart", "product"], name="cart_items_one_line_per_product"),
            models.CheckConstraint(condition=models.Q(qty__gt=0), name="cart_items_qty_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.qty} x product {self.product_id}"
