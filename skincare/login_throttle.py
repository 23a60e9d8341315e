"""Admin login throttling: failed logins are counted in the database (every worker and instance sees them).

Counted per client and per username. The client is its address behind ``TRUSTED_PROXIES``
(:mod:`skincare.clientaddr`), an IPv6 client by its /64. The username is counted as Django's login form
normalises it before authenticating (stripped, then the user model's ``normalize_username``, NFKC), so
``"demo-ops "`` and ``"demo-ops"`` are one counter; the default backend matches usernames case-sensitively, so case
is kept (``"Demo-Ops"`` is another account, which cannot log in as demo-ops either).
"""

from collections.abc import Callable
from datetime import timedelta
from functools import cached_property

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from skincare.clientaddr import client_address, throttle_key

USERNAME_MAX_LENGTH = 150


def client_ip(request: HttpRequest) -> str | None:
    """The address failed logins of ``request`` are counted under."""
    return throttle_key(client_address(request))


def login_username(raw: object) -> str:
    """``raw`` as the admin's login form hands it to ``authenticate`` (``UsernameField``: strip, then NFKC)."""
    return get_user_model().normalize_username(str(raw).strip())[:USERNAME_MAX_LENGTH]


def window_start() -> ExpressionWrapper:
    """The start of the counting window, by the database clock."""
    window = timedelta(seconds=settings.ADMIN_LOGIN_WINDOW_SECONDS)
    return ExpressionWrapper(Now() - window, output_field=DateTimeField())


class AdminLoginThrottleMiddleware:
    """Refuses admin login POSTs with 429 once a client address or a username has ADMIN_LOGIN_MAX_FAILURES failed
    attempts within ADMIN_LOGIN_WINDOW_SECONDS. Failures are rows in ``admin_login_failures`` (shared by every
    worker and instance), written by the ``user_login_failed`` receiver in :mod:`skincare.signals`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    @cached_property
    def login_path(self) -> str:
        """The admin login's path, resolved once per process (a ``reverse`` costs every POST ~0.02 ms otherwise)."""
        return reverse("admin:login")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST" and request.path == self.login_path and self.blocked(request):
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

        limit = settings.ADMIN_LOGIN_MAX_FAILURES
        username = login_username(request.POST.get("username", ""))
        ip = client_ip(request)
        recent = AdminLoginFailure.objects.filter(failed_at__gte=window_start())
        by_ip = recent.filter(client_ip=ip).count() if ip else 0
        by_user = recent.filter(username=username).count() if username else 0
        return by_ip >= limit or by_user >= limit
