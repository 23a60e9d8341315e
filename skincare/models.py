"""The foundation's own table: failed admin logins, for the login throttle (skincare.middleware)."""

from django.db import models
from django.db.models.functions import Now


class AdminLoginFailure(models.Model):
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    username = models.CharField(max_length=150, blank=True)
    failed_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "admin_login_failures"
        indexes = [
            models.Index(fields=["client_ip", "failed_at"], name="admin_login_fail_ip_idx"),
            models.Index(fields=["username", "failed_at"], name="admin_login_fail_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.username or '-'} from {self.client_ip or '-'} at {self.failed_at}"
