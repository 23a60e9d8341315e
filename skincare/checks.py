"""Start-up checks of the foundation's settings (Django system checks, run by every manage.py command and, through
``run_startup_checks``, by the WSGI application before it serves anything)."""

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, ProgrammingError

from skincare import demo
from skincare.validation import parse_rate

# The checks that make production refuse the demo (here and in payments/checks.py). manage.py runs exactly these
# before any command in production, so even the commands that skip Django's system checks (shell, dbshell, ...)
# refuse; gunicorn runs them with every other check (skincare/wsgi.py).
PRODUCTION_TAG = "production"


@checks.register()
def timeout_budget(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A lock wait and one statement must end well before gunicorn kills the worker; otherwise the client gets a
    dropped connection instead of the 503 + Retry-After that the database timeouts turn into."""
    worker_ms = settings.GUNICORN_TIMEOUT * 1000
    lock_ms, statement_ms = settings.DB_LOCK_TIMEOUT_MS, settings.DB_STATEMENT_TIMEOUT_MS
    problems = []
    if not 0 < lock_ms < worker_ms:
        problems.append(f"DB_LOCK_TIMEOUT_MS ({lock_ms}) must be above 0 and below GUNICORN_TIMEOUT ({worker_ms} ms)")
    if not 0 < statement_ms < worker_ms:
        problems.append(
            f"DB_STATEMENT_TIMEOUT_MS ({statement_ms}) must be above 0 and below GUNICORN_TIMEOUT ({worker_ms} ms)"
        )
    return [
        checks.Warning(problem, hint="See docs/reliability.md (time budget).", id="skincare.W001")
        for problem in problems
    ]


@checks.register()
def rate_limit_setting(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        parse_rate(settings.CHECKOUT_RATE_LIMIT)
    except ValueError as exc:
        return [checks.Error(f"CHECKOUT_RATE_LIMIT: {exc}", id="skincare.E001")]
    return []


@checks.register()
def client_address_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """TRUSTED_PROXIES must be CIDRs; in production /metrics answers only with METRICS_TOKEN, so say when it is unset."""
    from skincare.clientaddr import parse_networks

    problems: list[checks.CheckMessage] = []
    try:
        parse_networks(settings.TRUSTED_PROXIES)
    except ValueError as exc:
        problems.append(checks.Error(f"TRUSTED_PROXIES: {exc}", id="skincare.E010"))
    if settings.PRODUCTION and not settings.METRICS_TOKEN:
        problems.append(
            checks.Info(  # not a warning: a deployment may well not scrape the web process
                "METRICS_TOKEN is not set: in production GET /metrics answers 403 to everyone",
                hint="Set METRICS_TOKEN and scrape with `Authorization: Bearer <token>` (docs/operations.md).",
                id="skincare.I010",
            )
        )
    return problems


@checks.register(PRODUCTION_TAG)
def production_secret_key(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A published key lets anyone forge sessions, CSRF tokens and sandbox payment links."""
    if settings.PRODUCTION and demo.is_published(settings.SECRET_KEY):
        return [
            checks.Error(
                "DJANGO_SECRET_KEY is a published demo/test value (it is in this repository): anyone can forge "
                "sessions and signed links with it.",
                hint="Set DJANGO_SECRET_KEY to a long random value of your own, e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`.",
                id="skincare.E002",
            )
        ]
    return []


def demo_accounts_present() -> list[str]:
    """The demo accounts of ``load_demo_data`` that can still be used: an active demo user, the demo token."""
    from django.contrib.auth import get_user_model

    from skincare.models import ApiToken
    from skincare.services import api_token_digest

    found = sorted(
        get_user_model().objects.filter(username__in=demo.DEMO_USERS, is_active=True).values_list("username", flat=True)
    )
    if ApiToken.objects.filter(digest=api_token_digest(demo.DEMO_CUSTOMER_TOKEN), revoked_at__isnull=True).exists():
        found.append(f"the API token {demo.DEMO_CUSTOMER_TOKEN!r}")
    return found


@checks.register(PRODUCTION_TAG)
def production_demo_accounts(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The demo accounts' credentials are published: a production database must not have them."""
    if not settings.PRODUCTION:
        return []
    try:
        found = demo_accounts_present()
    except ProgrammingError:
        return []  # not migrated yet: no accounts at all
    except DatabaseError as exc:
        return [
            checks.Warning(
                f"could not check the database for demo accounts: {exc}".strip(),
                hint="The database is unreachable; the check runs again at the next start.",
                id="skincare.W002",
            )
        ]
    if found:
        return [
            checks.Error(
                f"the database has the published demo accounts: {', '.join(found)}.",
                hint="Run `python manage.py remove_demo_data` (deactivates them and deletes the demo token; order "
                "history stays).",
                id="skincare.E003",
            )
        ]
    return []


def production_refusals() -> list[str]:
    """The errors of the checks tagged ``production`` (empty outside production or when the demo is gone)."""
    return [
        str(message)
        for message in checks.run_checks(tags=[PRODUCTION_TAG])
        if message.level >= checks.ERROR and not message.is_silenced()
    ]


def run_startup_checks() -> None:
    """Refuse to start a server with a configuration error (gunicorn itself runs no system checks)."""
    errors = [
        message
        for message in checks.run_checks(include_deployment_checks=False)
        if message.level >= checks.ERROR and not message.is_silenced()
    ]
    if errors:
        raise ImproperlyConfigured("refusing to start:\n" + "\n".join(str(error) for error in errors))
