"""The checkout's own table: the ``Idempotency-Key`` of each keyed checkout and the answer it got."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class IdempotencyKey(models.Model):
    """One ``Idempotency-Key`` of one customer's checkout and the answer it got (IETF httpapi Idempotency-Key draft,
    Stripe semantics). The row is inserted first in the checkout's transaction: a concurrent request with the same
    key waits on it (bounded by the lock timeout) and then replays the stored answer. ``fingerprint`` is the SHA-256
    of the canonical JSON body; the same key with another body is refused. Kept IDEMPOTENCY_KEY_TTL_SECONDS."""

    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(db_default=Now())
    # NULL only inside the transaction that claimed the key: it commits together with the answer.
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "idempotency_keys"
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["customer", "key"], name="idempotency_keys_customer_key_uniq")]
        indexes = [models.Index(fields=["created_at"], name="idempotency_keys_created_idx")]

    def __str__(self) -> str:
        return f"idempotency key {self.key!r} of customer {self.customer_id} ({self.response_status})"
