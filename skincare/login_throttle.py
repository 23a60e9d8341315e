"""Admin login throttling: failed logins are counted in the database (every worker and instance sees them)."""

from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone


def client_ip(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR") or None


class AdminLoginThrottleMiddleware:
    """Refuses admin login POSTs with 429 once a client address or a username has ADMIN_LOGIN_MAX_FAILURES failed
    attempts within ADMIN_LOGIN_WINDOW_SECONDS. Failures are rows in ``admin_login_failures`` (shared by every
    worker and instance), written by the ``user_login_failed`` receiver in :mod:`skincare.signals`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST" and request.path == reverse("admin:login") and self.blocked(request):
            window = settings.ADMIN_LOGIN_WINDOW_SECONDS
            response = HttpResponse(
                "Too many failed login attempts. Try again later.", status=429, content_type="text/plain"
            )
            response["Retry-After"] = str(window)
            return response
        return self.get_response(request)

    @staticmethod
    def blocked(request: HttpRequest) -> bool:
        from skincare.models import AdminLoginFailure

        since = timezone.now() - timedelta(seconds=settings.ADMIN_LOGIN_WINDOW_SECONDS)
        limit = settings.ADMIN_LOGIN_MAX_FAILURES
        username = request.POST.get("username", "")[:150]
        ip = client_ip(request)
        recent = AdminLoginFailure.objects.filter(failed_at__gte=since)
        by_ip = recent.filter(client_ip=ip).count() if ip else 0
        by_user = recent.filter(username=username).count() if username else 0
        return by_ip >= limit or by_user >= limit
