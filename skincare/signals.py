"""Record failed admin logins (for the throttle) and forget them after a successful one, which makes the browser a
known device (skincare.login_throttle)."""

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest
from django.urls import reverse

from skincare.login_throttle import (
    ATTEMPT_ATTRIBUTE,
    FAILED_ATTRIBUTE,
    client_ip,
    issue_device,
    known_device,
    login_username,
    window_start,
)
from skincare.models import AdminLoginFailure, KnownDevice


def _is_admin_login(request: HttpRequest | None) -> bool:
    return request is not None and request.path == reverse("admin:login")


@receiver(user_login_failed)
def record_admin_login_failure(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kw: Any
) -> None:
    if not _is_admin_login(request):
        return
    assert request is not None
    if getattr(request, ATTEMPT_ATTRIBUTE, None) is not None:
        setattr(request, FAILED_ATTRIBUTE, True)  # the throttle counted this attempt before it let it through: keep it
    else:  # a login the throttle's middleware did not count
        username = login_username(credentials.get("username", ""))  # already the form's cleaned value; the same rule
        AdminLoginFailure.objects.create(
            client_ip=client_ip(request), username=username, device=known_device(request, username) or ""
        )
    # Keep the table small: rows older than the window no longer count.
    AdminLoginFailure.objects.filter(failed_at__lt=window_start()).delete()


@receiver(user_logged_in)
def forget_admin_login_failures(sender: Any, request: HttpRequest | None, user: Any, **kw: Any) -> None:
    if _is_admin_login(request):
        assert request is not None
        # This address's failures for this account only: a success must not wipe what others' guesses counted.
        AdminLoginFailure.objects.filter(username=user.get_username(), client_ip=client_ip(request)).delete()
        # ... and this browser's, which from now on is a known device with a fresh id (skincare.login_throttle).
        device = known_device(request, user.get_username())
        if device is not None:
            AdminLoginFailure.objects.filter(device=device).delete()
            KnownDevice.objects.filter(device=device).delete()  # replaced by the fresh id below
        issue_device(request, user.get_username())
