"""The production profile (DJANGO_ENV=production), checked in fresh processes with production environment
variables: `check --deploy` passes, secrets and hosts are required, TLS behind a proxy works; and the admin login
throttle (which is on everywhere)."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from skincare.models import AdminLoginFailure
from skincare.tests.test_metrics import _url

ROOT = Path(__file__).resolve().parents[2]


def production_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PAYMENT_"))}
    env.update(
        {
            "DJANGO_ENV": "production",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "PAYMENT_WEBHOOK_SECRET": secrets.token_urlsafe(32),  # real values: production refuses published ones
            "DJANGO_ALLOWED_HOSTS": "shop.example",
            "DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
            "METRICS_TOKEN": secrets.token_urlsafe(32),  # without it /metrics is closed in production (skincare.I010)
            "DATABASE_URL": _url(),
            "LOG_LEVEL": "WARNING",
        }
    )
    env.update(overrides)
    return {k: v for k, v in env.items() if v != ""}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own manage.py
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.django_db
def test_check_deploy_passes_with_production_settings() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize("missing", ["DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS"])
@pytest.mark.django_db
def test_production_refuses_to_start_without(missing: str) -> None:
    result = manage("check", env=production_env(**{missing: ""}))
    assert result.returncode != 0
    assert missing in result.stderr


PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.test import Client
c = Client()
out = {"debug": settings.DEBUG}
r = c.get("/v1/products", HTTP_HOST="shop.example")
out["plain"] = [r.status_code, r.get("Location")]
r = c.get("/v1/products", HTTP_HOST="shop.example", HTTP_X_FORWARDED_PROTO="https")
out["proxied"] = [r.status_code, r.get("Strict-Transport-Security")]
r = c.get("/healthz", HTTP_HOST="shop.example")
out["healthz"] = r.status_code
out["cookies"] = [settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE]
r = c.get("/admin/login/", HTTP_HOST="shop.example", HTTP_X_FORWARDED_PROTO="https")
out["admin_frame"] = r.get("X-Frame-Options")
print(json.dumps(out))
"""


@pytest.mark.django_db
def test_https_behind_a_proxy_hsts_and_secure_cookies() -> None:
    env = production_env(DJANGO_DEBUG="true", DJANGO_SETTINGS_MODULE="config.settings")
    result = subprocess.run(  # noqa: S603
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["debug"] is False  # DJANGO_DEBUG cannot turn it on in production
    assert seen["plain"] == [301, "https://shop.example/v1/products"]
    assert seen["proxied"][0] == 200
    assert seen["proxied"][1] == "max-age=31536000; includeSubDomains; preload"
    assert seen["healthz"] == 200  # probes are exempt from the HTTPS redirect
    assert seen["cookies"] == [True, True]
    assert seen["admin_frame"] == "DENY"  # the browser-only XFrameOptionsMiddleware (security.W002 is silenced)


# ---------------------------------------------------------------------------------------------------------------
# Admin login throttling


@pytest.fixture
def staff(db):  # type: ignore[no-untyped-def]
    return get_user_model().objects.create_user("ops-throttle", password="right-password-for-tests", is_staff=True)


def login(client: Client, username: str, password: str) -> int:
    response = client.post("/admin/login/", {"username": username, "password": password, "next": "/admin/"})
    return response.status_code


def test_admin_login_is_throttled_after_repeated_failures(staff, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 3
    client = Client(REMOTE_ADDR="198.51.100.7")

    assert [login(client, "ops-throttle", f"wrong-{i}") for i in range(3)] == [200, 200, 200]  # form shown again
    assert AdminLoginFailure.objects.count() == 3
    # Even the right password is refused now, so guessing cannot continue.
    blocked = client.post("/admin/login/", {"username": "ops-throttle", "password": "right-password-for-tests"})
    assert blocked.status_code == 429
    assert blocked["Retry-After"] == str(settings.ADMIN_LOGIN_WINDOW_SECONDS)
    # The lock is this address's for this username: another address is not locked out of the account,
    # and the real operator logs in from there (skincare/tests/test_login_lockout.py has the whole story).
    assert login(Client(REMOTE_ADDR="198.51.100.8"), "ops-throttle", "x") == 200
    assert login(Client(REMOTE_ADDR="198.51.100.8"), "ops-throttle", "right-password-for-tests") == 302


def test_failures_expire_with_the_window_and_success_clears_them(staff, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ADMIN_LOGIN_MAX_FAILURES = 2
    client = Client(REMOTE_ADDR="198.51.100.9")
    assert login(client, "ops-throttle", "wrong") == 200
    assert login(client, "ops-throttle", "right-password-for-tests") == 302  # below the limit: in
    assert AdminLoginFailure.objects.filter(username="ops-throttle").count() == 0

    login(Client(REMOTE_ADDR="198.51.100.10"), "ops-throttle", "wrong")
    login(Client(REMOTE_ADDR="198.51.100.10"), "ops-throttle", "wrong")
    assert login(Client(REMOTE_ADDR="198.51.100.10"), "ops-throttle", "wrong") == 429
    with connection.cursor() as cursor:  # the window passes (by the failures' own timestamps)
        cursor.execute("UPDATE admin_login_failures SET failed_at = failed_at - interval '1 hour'")
    assert login(Client(REMOTE_ADDR="198.51.100.10"), "ops-throttle", "right-password-for-tests") == 302
