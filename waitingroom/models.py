"""The waiting room's two tables (docs/queue.md): a product's queue, and one pass per customer and product."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class PassState(models.TextChoices):
    """A pass's state: the one vocabulary of the pass API, the checkout's ``admission_required`` refusal, the admin,
    the metrics and the sale board. Derived from the pass's row by the database clock (``PASS_OWN_STATE_SQL`` in
    ``waitingroom.selectors``), never stored."""

    WAITING = "waiting", "not admitted yet"
    ADMITTED = "admitted", "admitted, unused, before admitted_until"
    USED = "used", "a checkout used the admission"
    EXPIRED = "expired", "admitted, unused past admitted_until: the turn went to the next in line"
    # The pass API's word for a waiting pass that can no longer lead to a purchase (nothing available and nothing
    # reserved, or the sale ended): decided by the product's stock and window, not by the pass's row.
    SOLD_OUT = "sold_out", "waiting, but no unit can come back"


class ProductQueue(models.Model):
    """A product whose checkout requires an admission. No row: the product sells as it always did.

    ``admitted_through`` is the serving counter: every pass with a position up to it has been admitted (positions
    are admitted in order). ``credit`` is the admissions the pace has earned and not yet granted, up to
    ``credited_at`` (database clock); a paused queue earns nothing."""

    product = models.OneToOneField(
        "inventory.Product", on_delete=models.CASCADE, primary_key=True, related_name="queue"
    )
    admit_per_second = models.PositiveIntegerField(
        help_text="Admissions per second (the pace); changes take effect at the next advance."
    )
    paused = models.BooleanField(default=False, help_text="A paused queue admits nobody; every pass says so.")
    credit = models.FloatField(default=0)
    credited_at = models.DateTimeField(null=True, blank=True)
    positioned_through = models.BigIntegerField(default=0)
    admitted_through = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "product_queues"
        constraints = [
            models.CheckConstraint(condition=Q(admit_per_second__gte=1), name="product_queue_pace_positive"),
            models.CheckConstraint(condition=Q(credit__gte=0), name="product_queue_credit_not_negative"),
        ]

    def __str__(self) -> str:
        return f"queue of product {self.product_id}"


class QueuePass(models.Model):
    """A customer's place in a product's queue: one per (product, customer), enforced by the unique constraint.

    ``early``: joined before ``sale_starts_at`` (database clock); early passes are placed in the order of ``draw``
    (``random()`` at the join), the others after them by ``id`` (arrival). ``position`` is given by the advancer
    at the opening or, for a later joiner, at the first advance after its join."""

    id = models.BigAutoField(primary_key=True)
    product = models.ForeignKey("inventory.Product", on_delete=models.CASCADE, related_name="+")
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    early = models.BooleanField()
    draw = models.FloatField()
    position = models.BigIntegerField(null=True, blank=True)
    joined_at = models.DateTimeField()
    admitted_at = models.DateTimeField(null=True, blank=True)
    admitted_until = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "queue_passes"
        constraints = [
            models.UniqueConstraint(fields=["product", "customer"], name="queue_pass_one_per_customer"),
            models.UniqueConstraint(fields=["product", "position"], name="queue_pass_position_unique"),
            models.CheckConstraint(
                condition=Q(admitted_at__isnull=True) | Q(position__isnull=False, admitted_until__isnull=False),
                name="queue_pass_admitted_has_position",
            ),
            models.CheckConstraint(
                condition=Q(used_at__isnull=True) | Q(admitted_at__isnull=False), name="queue_pass_used_was_admitted"
            ),
        ]
        indexes = [
            models.Index(fields=["product", "id"], condition=Q(position__isnull=True), name="queue_pass_unplaced"),
            models.Index(
                fields=["product", "admitted_until"],
                condition=Q(admitted_at__isnull=False, used_at__isnull=True),
                name="queue_pass_outstanding",
            ),
        ]

    def __str__(self) -> str:
        return f"pass {self.pk} (product {self.product_id}, customer {self.customer_id})"
