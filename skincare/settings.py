"""Django settings for the skincare flash-sale backend. Everything deployment-specific comes from the environment."""

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from skincare import demo, logs, modes

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# One switch, DJANGO_ENV, with exactly two values (skincare/modes.py): ``production`` (DEBUG off, DJANGO_SECRET_KEY
# and DJANGO_ALLOWED_HOSTS required, secure cookies, HSTS, HTTPS redirect: the production block at the end of this
# file; every start-up refuses the demo, weak secrets and Django's failed deployment checks: checks tagged
# "production", skincare/checks.py, payments/checks.py) and ``development``. Anything else refuses to start. Nothing
# said anywhere is production: development must be asked for (`make run` and the test suite do). The environment
# wins; only when it says nothing is the .env file's own DJANGO_ENV line read, and production never reads .env.
PRODUCTION = modes.production(BASE_DIR / ".env" if env.bool("DJANGO_READ_DOT_ENV_FILE", default=True) else None)

# Development settings come from one place: the git-ignored .env at the repository root, which `make run` / `make db`
# write with labelled demo values when it is missing (devtools/devenv.py, values from skincare/demo.py). An exported
# variable wins over the file. Never read in production; the test suite turns it off (devtools/testenv.py).
if not PRODUCTION and env.bool("DJANGO_READ_DOT_ENV_FILE", default=True):
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = False if PRODUCTION else env.bool("DJANGO_DEBUG", default=False)
# There is no default secret key outside development: the key signs sessions, CSRF tokens and the sandbox's payment
# links. Only with DJANGO_DEBUG=true (or the explicit DJANGO_DEV_INSECURE_SECRET_KEY=true), and never with
# DJANGO_ENV=production, a fixed, public dev-only key is used; `make run`, `make test` and the benchmarks set
# labelled non-production keys of their own.
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY:
    if PRODUCTION or not (DEBUG or env.bool("DJANGO_DEV_INSECURE_SECRET_KEY", default=False)):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it (production); for development run `make run` or `make db` once, "
            "which writes the demo values to .env."
        )
    SECRET_KEY = demo.DEBUG_FALLBACK_SECRET_KEY  # development only
ALLOWED_HOSTS = (
    env.list("DJANGO_ALLOWED_HOSTS")
    if PRODUCTION
    else env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "skincare",
    "inventory",
    "orders",
    "payments",
    "carts",
    "waitingroom",
    "backoffice",
]

# The browser-only ones (skincare.middleware) run for the admin and the sandbox page and are skipped on the JSON
# API and the probes, where they do nothing useful (measured in docs/benchmarks.md).
MIDDLEWARE = [
    "skincare.requestlog.RequestLogMiddleware",
    "skincare.middleware.RequestBodyLimitMiddleware",
    "skincare.middleware.JsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "skincare.middleware.SessionMiddleware",
    "skincare.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "skincare.middleware.AuthenticationMiddleware",
    "skincare.login_throttle.AdminLoginThrottleMiddleware",
    "skincare.middleware.MessageMiddleware",
    "skincare.middleware.XFrameOptionsMiddleware",
]
if PRODUCTION:
    # Nothing but /healthz is served until the demo-account check has run against the database (skincare/checks.py).
    MIDDLEWARE.insert(
        MIDDLEWARE.index("skincare.middleware.JsonErrorsMiddleware") + 1, "skincare.checks.DemoAccountGate"
    )

ROOT_URLCONF = "skincare.urls"
# Largest request body accepted (bytes); a larger one is refused with 413 payload_too_large before it is read.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("REQUEST_MAX_BODY_BYTES", default=2_621_440)
CSRF_FAILURE_VIEW = "skincare.api.csrf_failure"
WSGI_APPLICATION = "skincare.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


# The time budget of a request (docs/reliability.md): a lock wait and one statement both end well before gunicorn
# kills the worker, so a stuck request always gets its 503 + Retry-After (skincare.W001 warns otherwise).
DB_LOCK_TIMEOUT_MS = env.int("DB_LOCK_TIMEOUT_MS", default=5000)
DB_STATEMENT_TIMEOUT_MS = env.int("DB_STATEMENT_TIMEOUT_MS", default=15000)
GUNICORN_TIMEOUT = env.int("GUNICORN_TIMEOUT", default=30)
# The database URL points at PgBouncer in transaction mode (no startup ``options``; see _database()).
PGBOUNCER = env.bool("DB_PGBOUNCER", default=False)
# Server-side prepared statements (psycopg's prepare_threshold with Django's server-side binding): a statement a
# connection has run PREPARE_THRESHOLD times is parsed once and then only planned and executed (the checkout's
# statements are planned once too: skincare.db.generic_plans), about 0.65 ms of the primary's CPU off every checkout
# (docs/benchmarks.md#issue-26). On by default on a direct
# connection; PgBouncer 1.18 in transaction mode cannot keep a prepared statement (it lives in one server session),
# so it is off with DB_PGBOUNCER=true and asking for both refuses to start. Unknown values are errors.
_PREPARED = env.str("DB_PREPARED_STATEMENTS", default="").strip().lower()
if _PREPARED not in ("", "true", "false"):
    raise ImproperlyConfigured(f"DB_PREPARED_STATEMENTS must be true or false, not {_PREPARED!r}")
DB_PREPARED_STATEMENTS = _PREPARED == "true" if _PREPARED else not PGBOUNCER
if DB_PREPARED_STATEMENTS and PGBOUNCER:
    raise ImproperlyConfigured(
        "DB_PREPARED_STATEMENTS=true with DB_PGBOUNCER=true: PgBouncer 1.18 in transaction mode cannot keep "
        "server-side prepared statements; leave DB_PREPARED_STATEMENTS unset (off behind PgBouncer)"
    )
# After how many runs on one connection a statement is prepared (psycopg's default): the checkout's statements are
# prepared from a connection's sixth checkout; one-off statements (the admin's) never pay the extra round trip.
DB_PREPARE_THRESHOLD = 5
# A service transaction slower than this is logged as a warning (logger skincare.db.slow).
DB_SLOW_TRANSACTION_MS = env.int("DB_SLOW_TRANSACTION_MS", default=1000)
# A persistent connection idle longer than this is health-checked (SELECT 1) before a request uses it.
DB_HEALTH_CHECK_AFTER_IDLE_MS = env.int("DB_HEALTH_CHECK_AFTER_IDLE_MS", default=250)


def _embedded_database_url() -> str | None:
    """The embedded development server's URL when it runs (``make db``). Development tooling only: the production
    image has no ``devtools`` package and must set DATABASE_URL."""
    try:
        from devtools import devdb
    except ImportError:
        return None
    return devdb.url()


def _database():
    url = env("DATABASE_URL", default="") or _embedded_database_url()
    if not url:
        raise environ.ImproperlyConfigured(
            "DATABASE_URL is not set and the embedded PostgreSQL is not running: run `make db` or set DATABASE_URL."
        )
    config = env.db_url_config(url)
    options = config.setdefault("OPTIONS", {})
    if not config.get("HOST") and "host" in options:  # Unix-socket URLs carry the directory as ?host=
        config["HOST"] = options.pop("host")
    # Waiting for a row lock is bounded: a request that cannot get its lock in time fails with 55P03 and becomes a
    # 503 with Retry-After instead of piling up behind a stuck transaction. Talking to PostgreSQL directly, both
    # bounds go in the libpq ``options`` startup parameter, so every statement is bounded: services, reads, the
    # admin, migrations. PgBouncer refuses that parameter, so DB_PGBOUNCER=true leaves it out, and then each service
    # transaction run by skincare.db.retry_transient sets both bounds itself with SET LOCAL (which survives a
    # transaction-mode pooler); other statements run with the server's defaults.
    if not PGBOUNCER:
        options.setdefault(
            "options", f"-c lock_timeout={DB_LOCK_TIMEOUT_MS} -c statement_timeout={DB_STATEMENT_TIMEOUT_MS}"
        )
    if DB_PREPARED_STATEMENTS:
        options["server_side_binding"] = True
        options["prepare_threshold"] = DB_PREPARE_THRESHOLD
    if env.bool("DB_POOL", default=False):
        # Django's psycopg pool, per process: connections are borrowed per request and returned at its end.
        options["pool"] = {
            "min_size": env.int("DB_POOL_MIN_SIZE", default=1),
            "max_size": env.int("DB_POOL_MAX_SIZE", default=4),
            "timeout": env.float("DB_POOL_TIMEOUT", default=10.0),
        }
        config["CONN_MAX_AGE"] = 0  # the pool owns connection lifetime
        config["CONN_HEALTH_CHECKS"] = False
    else:
        config["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
        # Off by default (measured: +11-22 % sold-out 409s/s without it, docs/benchmarks.md): a health check costs a
        # round trip (SELECT 1) at the start of every request that uses the database, even a checkout refused from
        # memory. Instead, a connection idle for more than DB_HEALTH_CHECK_AFTER_IDLE_MS is checked before its first
        # query (skincare.connections): a busy worker never pays, one that sat through a database restart reconnects
        # (payments/tests/test_outages.py runs both ways).
        config["CONN_HEALTH_CHECKS"] = env.bool("DB_CONN_HEALTH_CHECKS", default=False)
    # No session state: server-side cursors (QuerySet.iterator) would need the same server connection across
    # transactions, which a transaction-mode pooler does not promise. (Prepared statements: DB_PREPARED_STATEMENTS
    # above; advisory locks, where used, must be pg_advisory_xact_lock.)
    config["DISABLE_SERVER_SIDE_CURSORS"] = True
    config.setdefault("TEST", {})["NAME"] = env("DATABASE_TEST_NAME", default=f"test_{config['NAME']}")
    return config


DATABASES = {"default": _database()}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["skincare.api.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["skincare.api.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["skincare.api.JSONParser"],
    "EXCEPTION_HANDLER": "skincare.api.exception_handler",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "skincare.api.JsonOnlyNegotiation",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "skincare-checkout API",
    "DESCRIPTION": (
        "Orders and inventory that stay consistent under flash-sale traffic. Every error body is "
        '`{"error": "<for humans>", "code": "<stable code>", ...details}`.'
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # Swagger UI from the drf-spectacular-sidecar wheel, served by this app (no CDN).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# Domain settings
RESERVATION_TTL_SECONDS = env.int("RESERVATION_TTL_SECONDS", default=1800)
# A server-side cart expires this long after its last change (database clock); it holds no stock meanwhile.
CART_TTL_SECONDS = env.int("CART_TTL_SECONDS", default=1800)
# Expired and checked-out carts answer 410 / 409 this long, then prune_retention deletes them.
CART_RETENTION_SECONDS = env.int("CART_RETENTION_SECONDS", default=86400)
# Open (unexpired) carts one customer may hold at once; another create answers 409 too_many_open_carts (0 = no cap).
MAX_OPEN_CARTS_PER_CUSTOMER = env.int("MAX_OPEN_CARTS_PER_CUSTOMER", default=10)
# The waiting room (docs/queue.md, waitingroom/): a queued product's default pace (admissions per second, the admin
# and flash_sale_setup --admit-per-second set each queue's own), how long before sale_starts_at its queue opens for
# joining, how long an admission lasts, the most admissions one advance may grant at once (in seconds of pace), and
# the bounds of a pass's poll_after.
QUEUE_ADMIT_PER_SECOND = env.int("QUEUE_ADMIT_PER_SECOND", default=10)
QUEUE_OPENS_BEFORE_SECONDS = env.int("QUEUE_OPENS_BEFORE_SECONDS", default=3600)
ADMISSION_TTL_SECONDS = env.int("ADMISSION_TTL_SECONDS", default=120)
QUEUE_MAX_BURST_SECONDS = env.int("QUEUE_MAX_BURST_SECONDS", default=2)
QUEUE_POLL_MIN_SECONDS = env.int("QUEUE_POLL_MIN_SECONDS", default=1)
QUEUE_POLL_MAX_SECONDS = env.int("QUEUE_POLL_MAX_SECONDS", default=30)
for _name in ("QUEUE_ADMIT_PER_SECOND", "ADMISSION_TTL_SECONDS", "QUEUE_MAX_BURST_SECONDS", "QUEUE_POLL_MIN_SECONDS"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1")
if QUEUE_OPENS_BEFORE_SECONDS < 0:
    raise ImproperlyConfigured("QUEUE_OPENS_BEFORE_SECONDS must not be negative")
if not QUEUE_POLL_MIN_SECONDS <= QUEUE_POLL_MAX_SECONDS <= ADMISSION_TTL_SECONDS:
    raise ImproperlyConfigured(
        "QUEUE_POLL_MAX_SECONDS must be between QUEUE_POLL_MIN_SECONDS and ADMISSION_TTL_SECONDS (a pass told to "
        "come back later than its admission lasts could miss its turn)"
    )
CHECKOUT_MAX_ITEMS = env.int("CHECKOUT_MAX_ITEMS", default=20)
CHECKOUT_MAX_QTY = env.int("CHECKOUT_MAX_QTY", default=100)
# How long a worker remembers a product it saw sold out and refuses it without a query (ms, at most 250; 0 = off).
SOLD_OUT_CACHE_MS = env.int("SOLD_OUT_CACHE_MS", default=250)
# How often a transaction that lost a deadlock or serialization race is retried from the start.
DB_TRANSIENT_RETRIES = env.int("DB_TRANSIENT_RETRIES", default=3)
# Attempts of a checkout of an `optimistic` product whose version check keeps losing, before 409 stock_conflict.
INVENTORY_OPTIMISTIC_ATTEMPTS = env.int("INVENTORY_OPTIMISTIC_ATTEMPTS", default=5)
PAYMENT_WEBHOOK_SECRET = env("PAYMENT_WEBHOOK_SECRET", default="")
PAYMENT_WEBHOOK_TOLERANCE_SECONDS = env.int("PAYMENT_WEBHOOK_TOLERANCE_SECONDS", default=300)
PAYMENT_SANDBOX = env.bool("PAYMENT_SANDBOX", default=False)
# The sandbox is a development tool: with DEBUG off it refuses to start (payments.E002) unless this demo-only opt-in
# is set (the Makefile's `make run` sets it).
PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG = env.bool("PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG", default=False)
# Where the sandbox posts its signed webhook: a fixed address, never derived from the request's Host header.
PAYMENT_SANDBOX_WEBHOOK_URL = env(
    "PAYMENT_SANDBOX_WEBHOOK_URL", default=f"http://127.0.0.1:{env.int('PORT', default=8000)}/v1/payments/webhook"
)
# How long a sandbox payment link (signed, in payment_url) stays valid.
PAYMENT_SANDBOX_LINK_MAX_AGE_SECONDS = env.int(
    "PAYMENT_SANDBOX_LINK_MAX_AGE_SECONDS", default=RESERVATION_TTL_SECONDS + 900
)
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="")
# The shop's currency (ISO 4217 code): every order is written in it, the API shows it, and a payment event in any
# other currency is a mismatch, never a payment (payments.services). Checked at start-up (skincare.E012).
SHOP_CURRENCY = env("SHOP_CURRENCY", default="IDR")

# Abuse and retries (docs/reliability.md)
# Idempotency-Key records of checkouts are kept this long (then pruned by prune_retention).
IDEMPOTENCY_KEY_TTL_SECONDS = env.int("IDEMPOTENCY_KEY_TTL_SECONDS", default=86400)
# Refusals stored under Idempotency-Keys, per customer: beyond the newest this many, older ones are forgotten.
IDEMPOTENCY_MAX_STORED_REFUSALS = env.int("IDEMPOTENCY_MAX_STORED_REFUSALS", default=100)
# Applied webhook event ids are kept this long; a gateway redelivers for a few days at most.
PROCESSED_EVENTS_RETENTION_DAYS = env.int("PROCESSED_EVENTS_RETENTION_DAYS", default=30)
# Open pending_payment orders one customer may hold at once (0 = no cap).
MAX_PENDING_ORDERS_PER_CUSTOMER = env.int("MAX_PENDING_ORDERS_PER_CUSTOMER", default=5)
# Checkouts per customer per fixed window, e.g. "20/minute" (second, minute, hour, day); empty = no limit.
CHECKOUT_RATE_LIMIT = env("CHECKOUT_RATE_LIMIT", default="")
# API tokens expire this many seconds after they are issued; unset = they never expire.
API_TOKEN_TTL_SECONDS = env.int("API_TOKEN_TTL_SECONDS", default=None)
# How long a worker remembers a valid token (no query per request). A revoked token keeps working in OTHER worker
# processes for at most this long (docs/reliability.md); 0 = look every token up.
API_TOKEN_CACHE_SECONDS = env.float("API_TOKEN_CACHE_SECONDS", default=10.0)

# Observability
# GET /metrics answers loopback clients only (never in production), unless METRICS_TOKEN is set: then
# `Authorization: Bearer <token>` from anywhere. With DJANGO_ENV=production it needs the token.
METRICS_TOKEN = env("METRICS_TOKEN", default="")
# One JSON line per request (logger skincare.access); off when a proxy or gunicorn's access log already has it.
ACCESS_LOG = env.bool("ACCESS_LOG", default=True)
LOG_FORMAT = env("LOG_FORMAT", default="json")
LOGGING = logs.logging_config(log_format=LOG_FORMAT, level=env("LOG_LEVEL", default="INFO"))

# Reverse proxies (comma-separated CIDRs, e.g. "127.0.0.1/32,10.0.0.0/8"; default none) whose X-Forwarded-For is
# believed: behind them the client address (admin login throttle, /metrics' loopback rule) is the right-most
# X-Forwarded-For entry that is not itself a trusted proxy. Without them the header is ignored.
TRUSTED_PROXIES = env.list("TRUSTED_PROXIES", default=[])

# Admin login throttling (skincare/login_throttle.py), failures within the window → 429: this many for one username
# from one address; from one address for any usernames; from the "unknown" address (no readable client address);
# for one username from everywhere (which blocks only addresses that have failed themselves).
ADMIN_LOGIN_MAX_FAILURES = env.int("ADMIN_LOGIN_MAX_FAILURES", default=5)
ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = env.int("ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS", default=20)
ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS = env.int("ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS", default=20)
ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME = env.int("ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME", default=100)
ADMIN_LOGIN_WINDOW_SECONDS = env.int("ADMIN_LOGIN_WINDOW_SECONDS", default=900)

# Behind a TLS-terminating proxy: DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO (the proxy must set it to
# "https" and strip it from clients), so request.is_secure() and the HTTPS redirect see the original scheme.
_proxy_ssl_header = env("DJANGO_SECURE_PROXY_SSL_HEADER", default="")
if _proxy_ssl_header:
    SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header, "https")

if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    # Probes and the scraper talk plain HTTP to the instance itself, not through the TLS proxy.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SESSION_COOKIE_HTTPONLY = True

# security.W002 looks for Django's XFrameOptionsMiddleware by its exact path; it is installed as
# skincare.middleware.XFrameOptionsMiddleware (a subclass that skips the JSON API), so browser pages still get
# X-Frame-Options: DENY (checked by skincare/tests/test_production.py).
SILENCED_SYSTEM_CHECKS = ["security.W002"]
