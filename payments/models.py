from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from orders.models import Order


class PaymentStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    # Money arrived for an order that is no longer payable (it expired or was cancelled first).
    REFUND_REQUIRED = "refund_required", "Refund required"
    # Money arrived but not the amount the order asks for; the order is left alone for ops to decide.
    AMOUNT_MISMATCH = "amount_mismatch", "Amount mismatch"
    # Money arrived in another currency than the order's; left alone for ops exactly like a wrong amount.
    CURRENCY_MISMATCH = "currency_mismatch", "Currency mismatch"


# The attempts ops must look at (the admin's "needs ops" filter, the partial index below).
NEEDS_OPS = [PaymentStatus.REFUND_REQUIRED, PaymentStatus.AMOUNT_MISMATCH, PaymentStatus.CURRENCY_MISMATCH]


class PaymentAttempt(models.Model):
    Status = PaymentStatus

    # no index of its own: payment_attempts_order_idx is that index (one write less per checkout)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="payment_attempts", db_index=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    received_amount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    # The currency the gateway reported with received_amount ('' before any money was reported).
    received_currency = models.CharField(max_length=3, blank=True, default="", db_default="")
    provider_reference = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "payment_attempts"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["order"], name="payment_attempts_order_idx"),
            models.Index(
                fields=["status"],
                name="payment_attempts_ops_idx",
                condition=Q(status__in=NEEDS_OPS),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=PaymentStatus.values),
                name="payment_attempts_status_valid",
            ),
        ]

    def __str__(self):
        return f"payment attempt #{self.pk} for order {self.order_id} ({self.status})"


class ProcessedEvent(models.Model):
    """One row per gateway event ever applied; inserted in the same transaction as the event's effect, so an
    event takes effect exactly once however often it is delivered."""

    class Outcome(models.TextChoices):
        """What applying an event did (``payment_event_apply``'s return value, stored in ``outcome``)."""

        DUPLICATE = "duplicate", "Already applied (nothing changed)"
        PAID = "paid", "Order paid"
        FAILED = "failed", "Payment failed"
        ALREADY_PAID = "already_paid", "Charge already on record"
        REFUND_REQUIRED = "refund_required", "Refund required"
        AMOUNT_MISMATCH = "amount_mismatch", "Amount mismatch"
        CURRENCY_MISMATCH = "currency_mismatch", "Currency mismatch"
        # Money for a gateway transaction this shop never issued: recorded in unmatched_payments, no order touched.
        UNMATCHED = "unmatched", "Money for a transaction this shop did not issue"

    event_id = models.TextField(primary_key=True)
    processed_at = models.DateTimeField(db_default=Now())
    event_type = models.CharField(max_length=40, blank=True, db_default="")
    order_id = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=40, blank=True, db_default="")
    payload = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "processed_events"
        ordering = ["-processed_at"]
        indexes = [models.Index(fields=["processed_at"], name="processed_events_retention_idx")]

    def __str__(self):
        return f"event {self.event_id} ({self.outcome})"


class PaymentSession(models.Model):
    """The gateway's payment page of one order (``payments.sessions``): created on the buyer's first visit to
    ``payment_url``, reused on every later one. ``redirect_url`` is empty only while a visit is creating it."""

    order = models.OneToOneField(Order, on_delete=models.PROTECT, primary_key=True, related_name="+")
    gateway = models.CharField(max_length=20)
    token = models.CharField(max_length=200, blank=True, db_default="")
    redirect_url = models.URLField(max_length=500, blank=True, db_default="")
    # The order id the gateway knows this session's transaction by: ``<order>-<attempt>``, one per attempt to create
    # it, because Midtrans refuses a second Snap transaction with an order id it has seen (an attempt whose answer
    # was lost would otherwise block every retry). Empty: the shop's order id. Every id ever issued is also in
    # gateway_transactions, which is where a notification is matched.
    gateway_order_id = models.CharField(max_length=50, blank=True, db_default="")
    # When the gateway's page and transaction end: at least MIDTRANS_EXPIRY_MARGIN_SECONDS before the order's
    # payment_expires_at (database clock).
    ends_at = models.DateTimeField()
    created_at = models.DateTimeField(db_default=Now())
    # The sweeper expired the order without the gateway's word (it did not answer): reconcile_payments looks.
    needs_reconciliation = models.BooleanField(db_default=False)
    # A sweeper's lease on asking the gateway about this order (``payments.sessions.sessions_check_due``): until then
    # no other sweeper asks about it or cancels it. Empty: nobody holds it.
    sweep_lease_until = models.DateTimeField(null=True, blank=True)
    sweep_lease_by = models.CharField(max_length=32, blank=True, db_default="")

    class Meta:
        db_table = "payment_sessions"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["created_at"], name="payment_sessions_created_idx")]

    def __str__(self):
        return f"{self.gateway} session of order {self.order_id}"


class GatewayTransaction(models.Model):
    """Every transaction id this shop ever asked a gateway to create, with the order it belongs to: written in the
    same statement that claims the attempt (``payments.sessions``), before the gateway is called, and never
    rewritten. A gateway's notification or status answer is matched to an order here and only here: an id is never
    parsed into an order id, so an id the shop did not issue (another shop's, one issued before a restore) can pay
    no order."""

    gateway_order_id = models.CharField(max_length=50, primary_key=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="+")
    gateway = models.CharField(max_length=20)
    created_at = models.DateTimeField(db_default=Now())
    # When the shop knew it closed at the gateway (absent there, failed, expired by the shop, or its money applied):
    # a new attempt for the order is created only once every earlier one is closed (payments.sessions).
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "gateway_transactions"
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.gateway} transaction {self.gateway_order_id} of order {self.order_id}"


class SessionPace(models.Model):
    """One row per gateway: the earliest instant (database clock) its next payment page may be created, shared by
    every web process (``payments.sessions.session_turn_take``, ``PAYMENT_SESSIONS_PER_SECOND``); a gateway's 429
    moves it on by the gateway's wait."""

    gateway = models.CharField(max_length=20, primary_key=True)
    next_at = models.DateTimeField()

    class Meta:
        db_table = "payment_session_pace"

    def __str__(self):
        return f"{self.gateway}: next payment page at {self.next_at}"


class SessionTurn(models.Model):
    """A payment-page turn booked for one order whose visit came while others were ahead of it
    (``payments.sessions.session_turn_take``): its visit at or after ``turn_at`` creates the page without queueing
    again, and spends the turn. A gateway's 429 moves every booked turn on by its wait."""

    order = models.OneToOneField(Order, on_delete=models.CASCADE, primary_key=True, related_name="+")
    turn_at = models.DateTimeField()

    class Meta:
        db_table = "payment_session_turns"

    def __str__(self):
        return f"payment page of order {self.order_id} at {self.turn_at}"


class UnmatchedPayment(models.Model):
    """Money a gateway reports for a transaction id that is not in ``gateway_transactions``: never applied to an
    order; kept until ops resolve it (refund it at the gateway, or settle it with the buyer) in the admin. Counted
    on the sale board, in ``sale_report`` and by ``reconcile_payments`` (exit 1) while unresolved."""

    gateway = models.CharField(max_length=20)
    gateway_order_id = models.CharField(max_length=50)
    transaction_id = models.CharField(max_length=200, blank=True, db_default="")
    gateway_status = models.CharField(max_length=40)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3, blank=True, db_default="")
    # The processed_events row that recorded it (one per gateway state: a redelivery records nothing more).
    event_id = models.TextField(unique=True)
    received_at = models.DateTimeField(db_default=Now())
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True, db_default="")

    class Meta:
        db_table = "unmatched_payments"
        ordering = ["-received_at"]
        indexes = [
            models.Index(fields=["received_at"], name="unmatched_payments_open_idx", condition=Q(resolved_at=None))
        ]

    def __str__(self):
        return f"unmatched {self.gateway} payment {self.gateway_order_id} ({self.amount} {self.currency})"
