"""Start-up checks of the foundation's settings (Django system checks, run by every manage.py command and, through
``run_startup_checks``, by the WSGI application before it serves anything)."""

import re
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, ProgrammingError

from skincare import db, demo
from skincare.validation import parse_rate

# The checks that make production refuse the demo (here and in payments/checks.py). manage.py runs exactly these
# before any command in production, so even the commands that skip Django's system checks (shell, dbshell, ...)
# refuse; gunicorn runs them with every other check (config/wsgi.py).
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
    """TRUSTED_PROXIES must be CIDRs, each inside a private or loopback network (a warning here in development;
    production refuses it, ``production_trusted_proxies``); in production /metrics answers only with METRICS_TOKEN,
    so say when it is unset."""
    from skincare.clientaddr import not_private, parse_networks

    problems: list[checks.CheckMessage] = []
    try:
        networks = parse_networks(settings.TRUSTED_PROXIES)
    except ValueError as exc:
        problems.append(checks.Error(f"TRUSTED_PROXIES: {exc}", id="skincare.E010"))
        networks = ()
    # In production such a range is refused instead (production_trusted_proxies, skincare.E013).
    public = [] if settings.PRODUCTION else not_private(networks)
    for network in public:
        problems.append(
            checks.Warning(
                f"TRUSTED_PROXIES: {network} is not a private or loopback network: every client in it can write the "
                "X-Forwarded-For entry the login throttle and /metrics believe.",
                hint="List your reverse proxies' own addresses or subnets (e.g. 10.0.3.0/24).",
                id="skincare.W010",
            )
        )
    if settings.PRODUCTION and not settings.METRICS_TOKEN:
        problems.append(
            checks.Info(  # not a warning: a deployment may well not scrape the web process
                "METRICS_TOKEN is not set: in production GET /metrics answers 403 to everyone",
                hint="Set METRICS_TOKEN and scrape with `Authorization: Bearer <token>` (docs/operations.md#metrics-get-metrics-prometheus-text-format).",
                id="skincare.I010",
            )
        )
    return problems


@checks.register(PRODUCTION_TAG)
def production_trusted_proxies(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A trusted range outside the private and loopback networks takes in clients that are not the shop's proxies:
    each of them could write the X-Forwarded-For entry the login throttle and /metrics believe (any address,
    loopback included)."""
    from skincare.clientaddr import not_private, parse_networks

    if not settings.PRODUCTION:
        return []
    try:
        networks = parse_networks(settings.TRUSTED_PROXIES)
    except ValueError:
        return []  # skincare.E010, every mode
    return [
        checks.Error(
            f"TRUSTED_PROXIES: {network} is not inside a private or loopback network (10.0.0.0/8, 172.16.0.0/12, "
            "192.168.0.0/16, 127.0.0.0/8, fc00::/7, ::1): every client in it could write the X-Forwarded-For entry "
            "the login throttle and /metrics believe.",
            hint="List your reverse proxies' own addresses or subnets (e.g. 10.0.3.0/24).",
            id="skincare.E013",
        )
        for network in not_private(networks)
    ]


POOLED_TIMEOUTS = "skincare.E014"


@checks.register()
def pooled_connection_timeouts(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Behind PgBouncer (``DB_PGBOUNCER=true``) the settings cannot put the bounds on the connection: every statement
    outside a service transaction runs with the database's defaults for the role. Fails closed: none, or looser than
    DB_LOCK_TIMEOUT_MS / DB_STATEMENT_TIMEOUT_MS, is an error (a database that cannot be asked: a warning)."""
    if not settings.PGBOUNCER:
        return []
    hint = (
        "Run `python manage.py migrate` against the primary (it sets the role's defaults in this database from "
        "DB_LOCK_TIMEOUT_MS and DB_STATEMENT_TIMEOUT_MS), then RECONNECT in PgBouncer's console (docs/operations.md#timeouts-behind-a-pooler)."
    )
    try:
        lock_ms, statement_ms = db.session_timeouts_ms()
    except DatabaseError as exc:  # nothing runs unbounded on a database that does not answer; a worker still boots
        message = f"could not read the pooled connection's timeouts: {exc}".strip()
        return [checks.Warning(message, hint=hint, id="skincare.W014")]
    problems = [
        f"{name} is {'unbounded' if found == 0 else f'{found} ms'} on a pooled connection; {setting} is {wanted} ms"
        for name, found, setting, wanted in (
            ("lock_timeout", lock_ms, "DB_LOCK_TIMEOUT_MS", settings.DB_LOCK_TIMEOUT_MS),
            ("statement_timeout", statement_ms, "DB_STATEMENT_TIMEOUT_MS", settings.DB_STATEMENT_TIMEOUT_MS),
        )
        if found == 0 or found > wanted
    ]
    return [checks.Error(problem, hint=hint, id=POOLED_TIMEOUTS) for problem in problems]


CURRENCY_CODE = re.compile(r"[A-Z]{3}")


@checks.register()
def shop_currency_setting(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Fail closed: a currency that is not a three-letter code would make every payment event a mismatch."""
    if not CURRENCY_CODE.fullmatch(settings.SHOP_CURRENCY):
        return [
            checks.Error(
                f"SHOP_CURRENCY={settings.SHOP_CURRENCY!r} is not an ISO 4217 code (three capital letters).",
                hint="e.g. SHOP_CURRENCY=IDR",
                id="skincare.E012",
            )
        ]
    return []


@checks.register(PRODUCTION_TAG)
def production_secret_key(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A published key lets anyone forge sessions, CSRF tokens and sandbox payment links; so does a published
    fallback key (every value signed with a fallback is accepted)."""
    if not settings.PRODUCTION:
        return []
    published_fallbacks = [i for i, key in enumerate(settings.SECRET_KEY_FALLBACKS, 1) if demo.is_published(key)]
    if published_fallbacks:
        return [
            checks.Error(
                f"DJANGO_SECRET_KEY_FALLBACKS entry {', '.join(map(str, published_fallbacks))} is a published "
                "demo/test value (it is in this repository): anyone can forge sessions and signed links with it.",
                hint="Remove it: only the keys this shop itself signed with belong there (docs/runbooks/access.md#rotate-the-secret-key).",
                id="skincare.E002",
            )
        ]
    if demo.is_published(settings.SECRET_KEY):
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


# Secrets shorter than this, or with fewer distinct characters, are refused in production (Django's own rule for
# SECRET_KEY is 50 characters and 5 distinct ones, security.W009, refused below as skincare.E020).
MIN_SECRET_LENGTH = 32
MIN_SECRET_DISTINCT = 10


def weak_secret(value: str) -> str | None:
    """Why ``value`` is not a secret to trust in production (published, short, low-entropy), or None."""
    if demo.is_published(value):
        return "a published demo/test value (it is in this repository)"
    stripped = value.strip()
    if len(stripped) < MIN_SECRET_LENGTH:
        return f"{len(stripped)} characters (at least {MIN_SECRET_LENGTH} are required)"
    if len(set(stripped)) < MIN_SECRET_DISTINCT:
        return f"only {len(set(stripped))} distinct characters (at least {MIN_SECRET_DISTINCT} are required)"
    return None


@checks.register(PRODUCTION_TAG)
def production_metrics_token(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A guessable METRICS_TOKEN opens /metrics to anyone (order volume, refusal rates during a sale)."""
    if not settings.PRODUCTION or not settings.METRICS_TOKEN:
        return []
    reason = weak_secret(settings.METRICS_TOKEN)
    if reason:
        return [
            checks.Error(
                f"METRICS_TOKEN is {reason}.",
                hint="Set METRICS_TOKEN to a long random value, e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`.",
                id="skincare.E011",
            )
        ]
    return []


def _django_deployment_checks() -> list[Any]:
    """The deployment checks of Django (``check --deploy``) that production refuses on: the secret key's length and
    entropy (and its fallbacks'), ALLOWED_HOSTS, HSTS, secure session and CSRF cookies, the HTTPS redirect, DEBUG."""
    from django.core.checks.security import base, csrf, sessions

    return [
        base.check_secret_key,
        base.check_secret_key_fallbacks,
        base.check_allowed_hosts,
        base.check_sts,
        base.check_ssl_redirect,
        base.check_debug,
        sessions.check_session_cookie_secure,
        csrf.check_csrf_cookie_secure,
    ]


@checks.register(PRODUCTION_TAG)
def production_deployment_checks(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Django's deployment checks only warn, and only under ``check --deploy``, which no server runs: in production
    every start-up runs the ones that matter here and refuses on them (skincare.E020, naming Django's id). A
    wildcard ALLOWED_HOSTS, which Django accepts, is refused too (skincare.E021).

    DJANGO_SECURE_SSL_REDIRECT=false stays possible behind a proxy that redirects itself: the redirect's check
    (security.W008) is reported as a warning only."""
    if not settings.PRODUCTION:
        return []
    problems: list[checks.CheckMessage] = []
    for check in _django_deployment_checks():
        for message in check(app_configs):
            if message.is_silenced():
                continue
            level = checks.Warning if message.id == "security.W008" else checks.Error
            problems.append(
                level(f"{message.msg} ({message.id})", hint=message.hint, obj=message.obj, id="skincare.E020")
            )
    if "*" in settings.ALLOWED_HOSTS:
        problems.append(
            checks.Error(
                "DJANGO_ALLOWED_HOSTS contains '*': any Host header is accepted (password-reset and payment links "
                "can be pointed at another site).",
                hint="List the host names the shop is served under.",
                id="skincare.E021",
            )
        )
    return problems


def demo_accounts_present() -> list[str]:
    """The demo accounts of ``load_demo_data`` that can still be used: an active demo user, the demo token."""
    from django.contrib.auth import get_user_model

    from skincare.models import ApiToken, api_token_digest

    found = sorted(
        get_user_model().objects.filter(username__in=demo.DEMO_USERS, is_active=True).values_list("username", flat=True)
    )
    if ApiToken.objects.filter(digest=api_token_digest(demo.DEMO_CUSTOMER_TOKEN), revoked_at__isnull=True).exists():
        found.append(f"the API token {demo.DEMO_CUSTOMER_TOKEN!r}")
    return found


# The demo-account check could not run (database unreachable). A command refuses on it; a web worker boots but
# serves nothing except /healthz until the check has run (DemoAccountGate), and readiness says why.
DEMO_CHECK_NOT_RUN = "skincare.E004"


@checks.register(PRODUCTION_TAG)
def production_demo_accounts(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The demo accounts' credentials are published: a production database must not have them. Fails closed: a
    check that could not run is an error, not a pass."""
    if not settings.PRODUCTION:
        return []
    try:
        found = demo_accounts_present()
    except ProgrammingError:
        return []  # not migrated yet: no accounts at all
    except DatabaseError as exc:
        return [
            checks.Error(
                f"could not check the database for demo accounts: {exc}".strip(),
                hint="The database is unreachable: nothing is served until the check has run against it.",
                id=DEMO_CHECK_NOT_RUN,
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
    """The errors of the checks tagged ``production`` (empty outside production or when everything is in order).
    Every management command runs them first (``refuse_in_production``)."""
    return [
        str(message)
        for message in checks.run_checks(tags=[PRODUCTION_TAG])
        if message.level >= checks.ERROR and not message.is_silenced()
    ]


# Commands that run even when production refuses: the way out, and the report itself.
RUN_WHEN_REFUSED = frozenset({"remove_demo_data", "check", "help", "version", "--help", "-h", "--version"})
# How a management command is started: manage.py, django-admin, python -m django.
COMMAND_PROGRAMS = frozenset({"manage.py", "django-admin", "django-admin.py", "__main__.py"})


def is_management_command(argv: list[str]) -> bool:
    if not argv:
        return False
    program = argv[0].replace("\\", "/").rsplit("/", 1)[-1]
    return program in COMMAND_PROGRAMS and (program != "__main__.py" or argv[0].endswith("django/__main__.py"))


def refuse_in_production(argv: list[str]) -> None:
    """With DJANGO_ENV=production, every management command, through manage.py or django-admin (also one that
    skips Django's system checks, such as ``shell``), first runs the checks tagged "production" and exits with
    their message on any error: a published or weak secret, a failed deployment check, the sandbox, the demo
    accounts, or a database on which the demo-account check cannot run. Called from ``SkincareConfig.ready``."""
    if not settings.PRODUCTION or not is_management_command(argv):
        return
    if (argv[1] if len(argv) > 1 else "help") in RUN_WHEN_REFUSED:
        return
    import importlib
    import importlib.util
    import sys
    import warnings

    from django.apps import apps

    # The apps after this one have not registered their checks yet (their ready() runs later): import them now.
    for app in apps.get_app_configs():
        if importlib.util.find_spec(f"{app.name}.checks") is not None:
            importlib.import_module(f"{app.name}.checks")
    with warnings.catch_warnings():  # the demo-account check queries during app start-up, on purpose
        warnings.filterwarnings("ignore", message="Accessing the database during app initialization")
        refusals = production_refusals()
    if refusals:
        program = argv[0].replace("\\", "/").rsplit("/", 1)[-1]
        sys.exit(f"{program}: production refuses to run:\n" + "\n".join(refusals))


def run_startup_checks() -> None:
    """Refuse to start a server with a configuration error (gunicorn itself runs no system checks). In production
    this includes every check tagged "production"; only a demo-account check that could not reach the database does
    not stop the worker: it boots and DemoAccountGate serves nothing until the check has run."""
    errors = [
        message
        for message in checks.run_checks(include_deployment_checks=False)
        if message.level >= checks.ERROR and not message.is_silenced()
    ]
    fatal = [error for error in errors if error.id != DEMO_CHECK_NOT_RUN]
    if fatal:
        raise ImproperlyConfigured("refusing to start:\n" + "\n".join(str(error) for error in fatal))
    if settings.PRODUCTION and not errors:
        demo_gate.passed()


class _DemoCheckState:
    """Per process: has the demo-account check run against the database since the start or the last outage?"""

    def __init__(self) -> None:
        self.verified = False
        self.reason = "the demo-account check has not run against the database yet"

    def passed(self) -> None:
        self.verified = True

    def pending(self, reason: str) -> None:
        self.verified = False
        self.reason = reason


demo_gate = _DemoCheckState()


class DemoAccountGate:
    """Production only (installed by the settings): nothing but ``/healthz`` is served until the demo-account check
    has run against the database in this process: at start-up, and again at the first request after a request of
    this worker met a database outage (a failover may bring a different database back). While it cannot run, every
    answer, ``/readyz``'s included, is 503 ``database_unavailable`` with the reason; when it finds demo accounts,
    503 ``demo_accounts_present``."""

    EXEMPT = frozenset({"/healthz"})

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        if not demo_gate.verified and request.path not in self.EXEMPT:
            refusal = self.check()
            if refusal is not None:
                return refusal
        response = self.get_response(request)
        if response.status_code == 503 and b"database_unavailable" in getattr(response, "content", b""):
            demo_gate.pending("a request met a database outage; the demo-account check runs again before serving")
        return response

    @staticmethod
    def check() -> Any:
        import logging

        from skincare.errors import error_response

        try:
            found = demo_accounts_present()
        except ProgrammingError:
            found = []
        except DatabaseError as exc:
            logging.getLogger(__name__).warning("demo-account check could not run: %s", exc)
            return error_response(
                f"Not serving: {demo_gate.reason}; the database is unreachable.",
                "database_unavailable",
                http_status=503,
                retry_after=2,
                status="unavailable",
            )
        if found:
            demo_gate.pending(f"the database has the published demo accounts: {', '.join(found)}")
            logging.getLogger(__name__).error("refusing to serve: %s", demo_gate.reason)
            return error_response(
                f"Not serving: {demo_gate.reason}. Run `python manage.py remove_demo_data`.",
                "demo_accounts_present",
                http_status=503,
                retry_after=30,
                status="unavailable",
            )
        demo_gate.passed()
        return None
