"""Admin login throttling: failed logins are counted in the database (every worker and instance sees them).

Three counters, the combined rule of django-axes (``AXES_LOCKOUT_PARAMETERS = [["ip_address", "username"],
"ip_address"]``) plus a far higher per-username one (why not django-axes itself: docs/reliability.md):

- per (address, username), ``ADMIN_LOGIN_MAX_FAILURES``: the usual lock. It stops guessing one account from one
  address, and nobody else: the admin's username is no secret, so a stranger's failures must not lock the real
  operator out from another address during a sale;
- per address, ``ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS``: one address guessing many usernames;
- per username, ``ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME`` (far above the others): one account guessed from many
  addresses. It blocks only addresses that have failed within the window themselves, so a correct password from
  an address with no failure always gets through, and a botnet gets one guess per fresh address.

The client is its address behind ``TRUSTED_PROXIES`` (:mod:`skincare.clientaddr`), an IPv6 client by its /64; a
request without a readable address (a unix socket) counts in one explicit "unknown" bucket (NULL) with a limit of
its own, ``ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS``. The username is counted as Django's login form normalises it
before authenticating (stripped, then the user model's ``normalize_username``, NFKC), so ``"demo-ops "`` and its
fullwidth spelling (U+FF44 ...) are the one account ``demo-ops``; the default backend matches usernames
case-sensitively, so case is kept. A successful login forgets its own (address, username) failures only.
``python manage.py admin_login_unlock`` clears a lock from the command line.
"""

from collections.abc import Callable
from datetime import timedelta
from functools import cached_property

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, DateTimeField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from skincare.clientaddr import client_address, throttle_key
from skincare.errors import error_response

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
    """Refuses admin login POSTs with 429 while one of the counters above is at its limit within
    ADMIN_LOGIN_WINDOW_SECONDS. Failures are rows in ``admin_login_failures`` (shared by every worker and instance),
    written by the ``user_login_failed`` receiver in :mod:`skincare.signals`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    @cached_property
    def login_path(self) -> str:
        """The admin login's path, resolved once per process (a ``reverse`` costs every POST ~0.02 ms otherwise)."""
        return reverse("admin:login")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST" and request.path == self.login_path and self.blocked(request):
            return error_response(
                "Too many failed login attempts. Try again later.",
                "throttled",
                http_status=429,
                retry_after=settings.ADMIN_LOGIN_WINDOW_SECONDS,
            )
        return self.get_response(request)

    @staticmethod
    def blocked(request: HttpRequest) -> bool:
        username = login_username(request.POST.get("username", ""))
        return blocked(address=client_ip(request), username=username)


def _same_address(address: str | None) -> Q:
    """The address's own failures; None is the "unknown" bucket (rows without an address)."""
    return Q(client_ip__isnull=True) if address is None else Q(client_ip=address)


def blocked(*, address: str | None, username: str) -> bool:
    """Whether a login attempt for ``username`` from ``address`` (a throttle key; None = unknown) is refused now.
    One query: the three counts over the window's failures of this address or this username."""
    from skincare.models import AdminLoginFailure

    here = _same_address(address)
    counts = AdminLoginFailure.objects.filter(failed_at__gte=window_start()).aggregate(
        pair=Count("id", filter=here & Q(username=username)),
        by_address=Count("id", filter=here),
        by_username=Count("id", filter=Q(username=username)),
    )
    address_limit = (
        settings.ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS
        if address is None
        else settings.ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS
    )
    return (
        (bool(username) and counts["pair"] >= settings.ADMIN_LOGIN_MAX_FAILURES)
        or counts["by_address"] >= address_limit
        # the username's own lock: never for an address that has not failed itself
        or (
            bool(username)
            and counts["by_address"] > 0
            and counts["by_username"] >= settings.ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME
        )
    )


def unlock(*, username: str | None = None, address: str | None = None) -> int:
    """Forget the failures of ``username`` (as the login form normalises it) and/or ``address`` (a client address;
    an IPv6 address stands for its /64, "unknown" for the bucket without an address): both given, that pair's
    only. Returns how many failures were forgotten."""
    import ipaddress

    from skincare.models import AdminLoginFailure

    failures = AdminLoginFailure.objects.all()
    if username is not None:
        failures = failures.filter(username=login_username(username))
    if address is not None:
        key = None if address == UNKNOWN_ADDRESS else throttle_key(ipaddress.ip_address(address))
        failures = failures.filter(_same_address(key))
    deleted, _ = failures.delete()
    return deleted


UNKNOWN_ADDRESS = "unknown"
