"""The foundation's own tables: failed admin logins and known devices (the login throttle), customer API
tokens (digests only), the feed of their invalidations, and rate-limit counters."""

import hashlib

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class AdminLoginFailure(models.Model):
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    username = models.CharField(max_length=150, blank=True)
    # The known device the attempt came from (its cookie's id, skincare.login_throttle); empty for other browsers.
    device = models.CharField(max_length=32, blank=True, default="")
    failed_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "admin_login_failures"
        indexes = [
            models.Index(fields=["client_ip", "failed_at"], name="admin_login_fail_ip_idx"),
            models.Index(fields=["username", "failed_at"], name="admin_login_fail_user_idx"),
            models.Index(fields=["device", "failed_at"], name="admin_login_fail_device_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.username or '-'} from {self.client_ip or '-'} at {self.failed_at}"


class KnownDevice(models.Model):
    """A browser the admin login throttle knows (skincare.login_throttle): a successful admin login issues one and
    its signed cookie names it. A cookie is honoured only while its row is here: deleting the row revokes that
    browser (``python manage.py admin_known_devices --revoke``), deleting them all revokes every browser."""

    device = models.CharField(max_length=32, unique=True)
    username = models.CharField(max_length=150)
    issued_at = models.DateTimeField(db_default=Now())
    # Where the login came from, to tell one browser from another in the list.
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "admin_known_devices"
        indexes = [models.Index(fields=["username", "issued_at"], name="admin_known_device_user_idx")]

    def __str__(self) -> str:
        return f"{self.device} of {self.username} since {self.issued_at}"


def api_token_digest(token: str) -> str:
    """What is stored for ``token``: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class ApiToken(models.Model):
    """A customer's API token, stored as the SHA-256 hex digest of the token: a database dump reveals no usable
    token. Tokens are random 256-bit values, so an unsalted fast hash is enough (nothing to brute-force)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())
    # NULL = never expires (API_TOKEN_TTL_SECONDS unset when it was issued). Compared with the database's now().
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_tokens"
        ordering = ["-id"]
        indexes = [models.Index(fields=["user"], name="api_tokens_active_user_idx", condition=Q(revoked_at=None))]
        constraints = [
            models.CheckConstraint(condition=Q(digest__regex=r"^[0-9a-f]{64}$"), name="api_tokens_digest_hex"),
        ]

    def __str__(self) -> str:
        return f"API token #{self.pk} of user {self.user_id}"


class ApiTokenInvalidation(models.Model):
    """One row per token invalidated (revoked, expiry changed, deleted) or user deactivated, written by database
    triggers (migration 0005), whoever changes the rows: the service, the admin, a shell or raw SQL. Every process
    reads the recent rows about once a second and forgets the named users' tokens (``skincare.selectors``).
    ``at`` is the inserting statement's ``clock_timestamp()``; rows are pruned after an hour (retention)."""

    id = models.BigAutoField(primary_key=True)
    user_id = models.IntegerField()  # not a foreign key: the user may be deleted in the same transaction
    at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "api_token_invalidations"
        indexes = [models.Index(fields=["at"], name="api_token_invalidations_at_idx")]

    def __str__(self) -> str:
        return f"tokens of user {self.user_id} invalidated at {self.at}"


class RateLimitCounter(models.Model):
    """One fixed-window hit counter per (scope, subject), updated with one upsert per hit: it holds across every
    gunicorn worker because it lives in PostgreSQL. A new window resets the count in the same statement."""

    scope = models.CharField(max_length=40)
    subject = models.CharField(max_length=100)
    window_start = models.DateTimeField()
    hits = models.IntegerField()

    class Meta:
        db_table = "rate_limit_counters"
        constraints = [models.UniqueConstraint(fields=["scope", "subject"], name="rate_limit_counters_uniq")]
        indexes = [models.Index(fields=["window_start"], name="rate_limit_counters_window_idx")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.subject} {self.hits} since {self.window_start}"
