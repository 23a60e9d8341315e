"""Start-up checks of the foundation's settings (Django system checks, run by every manage.py command and, through
``run_startup_checks``, by the WSGI application before it serves anything)."""

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from skincare.validation import parse_rate


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


def run_startup_checks() -> None:
    """Refuse to start a server with a configuration error (gunicorn itself runs no system checks)."""
    errors = [
        message
        for message in checks.run_checks(include_deployment_checks=False)
        if message.level >= checks.ERROR and not message.is_silenced()
    ]
    if errors:
        raise ImproperlyConfigured("refusing to start:\n" + "\n".join(str(error) for error in errors))
