"""Admin login throttling: failed logins are counted in the database (every worker and instance sees them).

Three counters for a browser the throttle does not know, the combined rule of django-axes
(``AXES_LOCKOUT_PARAMETERS = [["ip_address", "username"], "ip_address"]``) plus a far higher per-username one (why
not django-axes itself: docs/reliability.md):

- per (address, username), ``ADMIN_LOGIN_MAX_FAILURES``: the usual lock. It stops guessing one account from one
  address, and nobody else: the admin's username is no secret, so a stranger's failures must not lock the real
  operator out from another address during a sale;
- per address, ``ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS``: one address guessing many usernames;
- per username, ``ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME`` (far above the others): one account guessed from many
  addresses. It blocks only addresses that have failed within the window themselves (for any username), so a
  correct password from an address with no failure gets through, and a botnet gets one guess per fresh address.

A **known device** is exempt from all three (OWASP's device cookies, as django-device-cookies and OpenStack
Keystone do): a successful admin login sets a signed cookie naming the account and a random device id
(``admin_known_device``: HttpOnly, SameSite=Strict, Secure in production, sent to the login page only, valid
``KNOWN_DEVICE_MAX_AGE_SECONDS``). A login attempt for that account from that browser is counted by its device id
alone: ``ADMIN_LOGIN_MAX_FAILURES`` of its own failures lock that browser and nothing else. So no number of
strangers' failures, rented addresses (a /56 is 256 /64s) or clients sharing an undeclared proxy's address can lock
the operator out of a browser they have logged in from before, and a stolen cookie is worth five guesses a window.
A browser without a valid cookie for the account (a new laptop) falls under the counters above. Each issued device is
a row of ``admin_known_devices`` and a cookie counts only while its row is there: ``python manage.py
admin_known_devices`` lists them and revokes one (``--revoke ID``), an account's or all of them.

The client is its address behind ``TRUSTED_PROXIES`` (:mod:`skincare.clientaddr`), an IPv6 client by its /64; a
request without a readable address (a unix socket) counts in one explicit "unknown" bucket (NULL) with a limit of
its own, ``ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS``. The username is counted as Django's login form normalises it
before authenticating (stripped, then the user model's ``normalize_username``, NFKC), so ``"demo-ops "`` and its
fullwidth spelling (U+FF44 ...) are the one account ``demo-ops``; the default backend matches usernames
case-sensitively, so case is kept. A successful login forgets its own (address, username) failures and its
device's only. ``python manage.py admin_login_unlock`` clears a lock from the command line.

**An attempt is counted before it is let through** (:func:`admit`): one short transaction takes the advisory
keys of the attempt's counters (its address, its username, its device), counts, and writes the attempt's row
before the password is checked, so of N concurrent wrong passwords from one address exactly the limit reach the
password check. A refused attempt writes nothing; one that did not fail (a success, or a form that never reached
``authenticate``) deletes its row after the answer; a failure keeps it as the failure's record.
"""

import hashlib
import secrets
from collections.abc import Callable
from datetime import timedelta
from functools import cached_property

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import transaction
from django.db.models import Count, DateTimeField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from skincare.clientaddr import client_address, parse_address, report_untrusted_forwarding, throttle_key
from skincare.errors import error_response
from skincare.locks import advisory_xact_lock

USERNAME_MAX_LENGTH = 150
KNOWN_DEVICE_COOKIE = "admin_known_device"
KNOWN_DEVICE_SALT = "skincare.login_throttle.known-device"
# How long a browser stays known after its last successful login (an operator who logs in monthly stays known).
KNOWN_DEVICE_MAX_AGE_SECONDS = 90 * 24 * 3600
# Set on the request by the successful-login receiver (skincare.signals); the middleware turns it into the cookie.
NEW_DEVICE_ATTRIBUTE = "admin_known_device_issued"
# Set on the request by the middleware: the id of the attempt's row (admit()); by the failed-login receiver: True.
ATTEMPT_ATTRIBUTE = "admin_login_attempt"
FAILED_ATTRIBUTE = "admin_login_failed"


def client_ip(request: HttpRequest) -> str | None:
    """The address failed logins of ``request`` are counted under."""
    return throttle_key(client_address(request))


def login_username(raw: object) -> str:
    """``raw`` as the admin's login form hands it to ``authenticate`` (``UsernameField``: strip, then NFKC)."""
    return get_user_model().normalize_username(str(raw).strip())[:USERNAME_MAX_LENGTH]


def known_device(request: HttpRequest, username: str) -> str | None:
    """The device id of ``request``'s known-device cookie when it is valid (signed by this shop with its key or a
    fallback key, unexpired), names ``username`` and has not been revoked (its row is in ``admin_known_devices``);
    None otherwise."""
    from skincare.models import KnownDevice

    value = request.COOKIES.get(KNOWN_DEVICE_COOKIE)
    if not value or not username:
        return None
    try:
        named, device = signing.loads(value, salt=KNOWN_DEVICE_SALT, max_age=KNOWN_DEVICE_MAX_AGE_SECONDS)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if named != username or not isinstance(device, str):
        return None
    return device if KnownDevice.objects.filter(device=device, username=username).exists() else None


def issue_device(request: HttpRequest, username: str) -> str:
    """A fresh device id for a successful login of ``username``, recorded in ``admin_known_devices`` (expired ones
    are deleted); the middleware sets its cookie on the response."""
    from skincare.models import KnownDevice

    device = secrets.token_hex(16)
    KnownDevice.objects.create(
        device=device,
        username=username,
        client_ip=client_ip(request),
        user_agent=request.META.get("HTTP_USER_AGENT", "")[:200],
    )
    expired = ExpressionWrapper(Now() - timedelta(seconds=KNOWN_DEVICE_MAX_AGE_SECONDS), output_field=DateTimeField())
    KnownDevice.objects.filter(issued_at__lt=expired).delete()
    setattr(request, NEW_DEVICE_ATTRIBUTE, signing.dumps([username, device], salt=KNOWN_DEVICE_SALT))
    return device


def revoke_devices(*, device: str | None = None, username: str | None = None) -> int:
    """Revoke known devices: the one ``device`` id, every device of ``username``, or with neither every device of
    every account. Their cookies are then ignored (their browsers fall under the address counters). Returns how many
    were revoked."""
    from skincare.models import KnownDevice

    devices = KnownDevice.objects.all()
    if device is not None:
        devices = devices.filter(device=device)
    if username is not None:
        devices = devices.filter(username=login_username(username))
    deleted, _ = devices.delete()
    return deleted


def window_start() -> ExpressionWrapper:
    """The start of the counting window, by the database clock."""
    window = timedelta(seconds=settings.ADMIN_LOGIN_WINDOW_SECONDS)
    return ExpressionWrapper(Now() - window, output_field=DateTimeField())


class AdminLoginThrottleMiddleware:
    """Refuses admin login POSTs with 429 while one of the counters above is at its limit within
    ADMIN_LOGIN_WINDOW_SECONDS, and gives a browser that just logged in its known-device cookie. Failures are rows
    in ``admin_login_failures`` (shared by every worker and instance): each attempt's row is written before its
    password is checked (:func:`admit`) and kept when the ``user_login_failed`` receiver in :mod:`skincare.signals`
    marks the attempt failed. Every request passes :func:`skincare.clientaddr.report_untrusted_forwarding`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    @cached_property
    def login_path(self) -> str:
        """The admin login's path, resolved once per process (a ``reverse`` costs every POST ~0.02 ms otherwise)."""
        return reverse("admin:login")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        report_untrusted_forwarding(request)
        if request.method != "POST" or request.path != self.login_path:
            return self.get_response(request)
        username = login_username(request.POST.get("username", ""))
        allowed, attempt = admit(address=client_ip(request), username=username, device=known_device(request, username))
        if not allowed:
            return error_response(
                "Too many failed login attempts. Try again later.",
                "throttled",
                http_status=429,
                retry_after=settings.ADMIN_LOGIN_WINDOW_SECONDS,
            )
        setattr(request, ATTEMPT_ATTRIBUTE, attempt)
        try:
            response = self.get_response(request)
        finally:
            if attempt is not None and not getattr(request, FAILED_ATTRIBUTE, False):
                forget_attempt(attempt)  # not a failure: a success, or no password was checked
        issued = getattr(request, NEW_DEVICE_ATTRIBUTE, None)
        if issued is not None:
            response.set_cookie(
                KNOWN_DEVICE_COOKIE,
                issued,
                max_age=KNOWN_DEVICE_MAX_AGE_SECONDS,
                path=self.login_path,
                secure=settings.SESSION_COOKIE_SECURE,
                httponly=True,
                samesite="Strict",
            )
        return response


def _same_address(address: str | None) -> Q:
    """The address's own failures; None is the "unknown" bucket (rows without an address)."""
    return Q(client_ip__isnull=True) if address is None else Q(client_ip=address)


def counter_keys(*, address: str | None, username: str, device: str | None) -> list[int]:
    """The advisory-lock ids of the counters an attempt is counted in: its address (or the unknown bucket), its
    username and its device, each a 47-bit hash (a collision only makes two counters wait for each other)."""
    names = [f"address:{address or UNKNOWN_ADDRESS}", f"username:{username}"] + ([f"device:{device}"] if device else [])
    return [int.from_bytes(hashlib.blake2b(name.encode(), digest_size=6).digest()) % (2**47 - 1) + 1 for name in names]


def admit(*, address: str | None, username: str, device: str | None) -> tuple[bool, int | None]:
    """Decide and count as one step: (whether the attempt may go on to the password check, the id of its row).
    Under the advisory keys of its counters (docs/locking.md, the admin login's admission), :func:`blocked` counts
    the window's failures and the attempt's row is written in the same transaction, so the next attempt on any of
    these counters counts this one, however many arrive at once."""
    from skincare.models import AdminLoginFailure

    with transaction.atomic():
        advisory_xact_lock(space="admin_login", idents=counter_keys(address=address, username=username, device=device))
        if blocked(address=address, username=username, device=device):
            return False, None
        attempt = AdminLoginFailure.objects.create(client_ip=address, username=username, device=device or "")
    return True, attempt.pk


def forget_attempt(attempt: int) -> None:
    from skincare.models import AdminLoginFailure

    AdminLoginFailure.objects.filter(pk=attempt).delete()


def blocked(*, address: str | None, username: str, device: str | None = None) -> bool:
    """Whether a login attempt for ``username`` from ``address`` (a throttle key; None = unknown) is refused now;
    from a known device (its id), only that device's own failures count. One query over the window's failures
    (attempts being checked right now count as failures)."""
    from skincare.models import AdminLoginFailure

    recent = AdminLoginFailure.objects.filter(failed_at__gte=window_start())
    if device is not None:
        return recent.filter(device=device).count() >= settings.ADMIN_LOGIN_MAX_FAILURES
    here = _same_address(address)
    counts = recent.aggregate(
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
        # the username's own lock: never for an address that has not failed itself (for any username)
        or (
            bool(username)
            and counts["by_address"] > 0
            and counts["by_username"] >= settings.ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME
        )
    )


UNKNOWN_ADDRESS = "unknown"


def unlock_key(address: str) -> str | None:
    """The throttle key ``admin_login_unlock --address`` clears: the address read exactly as the throttle reads a
    client's (:func:`skincare.clientaddr.parse_address`: ``::ffff:a.b.c.d`` is the IPv4 address, an IPv6 address
    stands for its /64), None for ``unknown``; ValueError when it is not an address."""
    if address == UNKNOWN_ADDRESS:
        return None
    parsed = parse_address(address)
    if parsed is None:
        raise ValueError(f"not an IP address: {address!r}")
    return throttle_key(parsed)


def unlock(*, username: str | None = None, address: str | None = None) -> int:
    """Forget the failures of ``username`` (as the login form normalises it) and/or ``address`` (a client address;
    an IPv6 address stands for its /64, "unknown" for the bucket without an address): both given, that pair's
    only. Returns how many failures were forgotten."""
    from skincare.models import AdminLoginFailure

    failures = AdminLoginFailure.objects.all()
    if username is not None:
        failures = failures.filter(username=login_username(username))
    if address is not None:
        failures = failures.filter(_same_address(unlock_key(address)))
    deleted, _ = failures.delete()
    return deleted
