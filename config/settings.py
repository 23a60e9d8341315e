"""Django settings for the skincare flash-sale backend. Everything deployment-specific comes from the environment:
every variable read here is declared in config/variables.py, from which docs/configuration.md's tables are written
(``make docs``). A value that is not one a variable takes refuses to start (fail closed): ``yes`` is not a boolean,
``20s`` is not a number of seconds."""

import os
import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from config import modes
from config.environment import env_bool, env_choice, env_int, web_threads
from skincare import demo, logs

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


# Variables that are no longer read: each was a measured choice and is now a constant in the code that uses it
# (docs/benchmarks.md#decisions) or another setting. Set, they refuse to start rather than be silently ignored.
REMOVED_SETTINGS = {
    "DB_CONN_HEALTH_CHECKS": "a reused connection is checked only after an idle spell (skincare/connections.py)",
    "DB_HEALTH_CHECK_AFTER_IDLE_MS": "the idle spell is a constant (skincare/connections.py)",
    "DB_POOL": "persistent connections per worker (DB_CONN_MAX_AGE), no pool in the process",
    "DB_POOL_MIN_SIZE": "no pool in the process",
    "DB_POOL_MAX_SIZE": "no pool in the process",
    "DB_POOL_TIMEOUT": "no pool in the process",
    "GUNICORN_WORKER_CLASS": "gthread workers (config/gunicorn.conf.py)",
    "GUNICORN_THREADS": "WEB_THREADS",
    "GUNICORN_BACKLOG": "a constant (config/gunicorn.conf.py)",
    "GUNICORN_LOGLEVEL": "gunicorn logs at LOG_LEVEL",
    "GUNICORN_ACCESSLOG": "the application writes the access log (ACCESS_LOG)",
}
_removed = sorted(name for name in REMOVED_SETTINGS if name in os.environ)
if _removed:
    raise ImproperlyConfigured(
        "no longer settings: "
        + "; ".join(f"{name} ({REMOVED_SETTINGS[name]})" for name in _removed)
        + ". Unset them (docs/configuration.md)."
    )

# One switch, DJANGO_ENV, with exactly two values (config/modes.py): ``production`` (DEBUG off, DJANGO_SECRET_KEY
# and DJANGO_ALLOWED_HOSTS required, secure cookies, HSTS, HTTPS redirect: the production block at the end of this
# file; every start-up refuses the demo, weak secrets and Django's failed deployment checks: checks tagged
# "production", skincare/checks.py, payments/checks.py) and ``development``. Anything else refuses to start. Only
# the process environment selects the mode: nothing there is production whatever .env says (`make run`, `make test`
# and the test suite export development; a .env line that contradicts it refuses), and production never reads .env.
PRODUCTION = modes.production(BASE_DIR / ".env" if env_bool("DJANGO_READ_DOT_ENV_FILE", True) else None)
# What a start without DJANGO_ENV (production) is told when a setting is missing: it may be meant as development.
_DEVELOPMENT_HINT = (
    f"This process is production: {modes.VARIABLE} is not set in its environment, and .env is never read in "
    f"production. For development export {modes.VARIABLE}={modes.DEVELOPMENT} (`make run` does; README, Try it)."
    if modes.VARIABLE not in os.environ
    else ""
)

# Development settings come from one place: the git-ignored .env at the repository root, which `make run` / `make db`
# write with labelled demo values when it is missing (devtools/devenv.py, values from skincare/demo.py), with the
# embedded server's DATABASE_URL. An exported variable wins over the file. Never read in production; the test suite
# turns it off and exports what it needs itself (devtools/testenv.py).
if not PRODUCTION and env_bool("DJANGO_READ_DOT_ENV_FILE", True):
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = False if PRODUCTION else env_bool("DJANGO_DEBUG", False)
# There is no default secret key outside development: the key signs sessions, CSRF tokens and the sandbox's payment
# links. Only with DJANGO_DEBUG=true (or the explicit DJANGO_DEV_INSECURE_SECRET_KEY=true), and never with
# DJANGO_ENV=production, a fixed, public dev-only key is used; `make run`, `make test` and the benchmarks set
# labelled non-production keys of their own.
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
if not SECRET_KEY:
    if PRODUCTION or not (DEBUG or env_bool("DJANGO_DEV_INSECURE_SECRET_KEY", False)):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it (production); for development run `make run` or `make db` once, "
            f"which writes the demo values to .env. {_DEVELOPMENT_HINT}".strip()
        )
    SECRET_KEY = demo.DEBUG_FALLBACK_SECRET_KEY  # development only
# Earlier secret keys (comma-separated, newest first), while the key rotates (docs/runbooks/access.md#rotate-the-secret-key):
# what they signed (sessions, queue passes, payment links, known-device cookies) is still accepted; nothing new is
# signed with them. Production refuses a published one (skincare.E002) and a weak one (Django's security.W025, refused
# as skincare.E020); an empty entry ("a,,b") refuses to start.
_fallbacks = env("DJANGO_SECRET_KEY_FALLBACKS", default="")
SECRET_KEY_FALLBACKS = _fallbacks.split(",") if _fallbacks else []
if not all(key.strip() for key in SECRET_KEY_FALLBACKS):
    raise ImproperlyConfigured("DJANGO_SECRET_KEY_FALLBACKS has an empty entry: list the earlier keys, comma-separated")
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
    "checkout",
    "waitingroom",
    "backoffice",
]

# The browser-only ones (skincare.middleware) run for the admin and the sandbox page and are skipped on the JSON
# API and the probes, where they do nothing useful (measured in docs/benchmarks.md).
MIDDLEWARE = [
    "skincare.logs.RequestLogMiddleware",
    "skincare.middleware.ReleaseHeaderMiddleware",
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

ROOT_URLCONF = "config.urls"
# Largest request body accepted (bytes); a larger one is refused with 413 payload_too_large before it is read.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("REQUEST_MAX_BODY_BYTES", 2_621_440, minimum=1)
CSRF_FAILURE_VIEW = "skincare.api.csrf_failure"
WSGI_APPLICATION = "config.wsgi.application"

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
DB_LOCK_TIMEOUT_MS = env_int("DB_LOCK_TIMEOUT_MS", 5000, minimum=1)
DB_STATEMENT_TIMEOUT_MS = env_int("DB_STATEMENT_TIMEOUT_MS", 15000, minimum=1)
GUNICORN_TIMEOUT = env_int("GUNICORN_TIMEOUT", 30, minimum=1)
# Migrations run while the shop sells (docs/runbooks/deploys.md#apply-a-migration-during-a-sale): every statement of
# `manage.py migrate` (skincare/management/commands/migrate.py) waits at most MIGRATION_LOCK_TIMEOUT_MS for its lock
# instead of queueing behind checkouts (a queued ACCESS EXCLUSIVE request blocks every later checkout); a migration
# refused a lock is rolled back and retried, MIGRATION_ATTEMPTS times in all, MIGRATION_RETRY_PAUSE_MS apart.
# MIGRATION_STATEMENT_TIMEOUT_MS bounds each statement (0: none, as a concurrent index build on a big table needs;
# what would rewrite or long-lock a table is refused before it ships: skincare/tests/test_migration_guard.py).
MIGRATION_LOCK_TIMEOUT_MS = env_int("MIGRATION_LOCK_TIMEOUT_MS", 1000, minimum=1)
MIGRATION_STATEMENT_TIMEOUT_MS = env_int("MIGRATION_STATEMENT_TIMEOUT_MS", 0, minimum=0)
MIGRATION_ATTEMPTS = env_int("MIGRATION_ATTEMPTS", 10, minimum=1)
MIGRATION_RETRY_PAUSE_MS = env_int("MIGRATION_RETRY_PAUSE_MS", 2000, minimum=0)
# The database URL points at PgBouncer in transaction mode (no startup ``options``; see _database()).
PGBOUNCER = env_bool("DB_PGBOUNCER", False)
# Server-side prepared statements (psycopg's prepare_threshold with Django's server-side binding): a statement a
# connection has run DB_PREPARE_THRESHOLD times is parsed once and then only planned and executed (the checkout's
# statements are planned once too: skincare.db.generic_plans), about 0.65 ms of the primary's CPU off every checkout
# (docs/benchmarks.md#decisions). On by default on a direct connection. Whether they can be used is the deployment's
# fact, not a tuning: a pooler in transaction mode cannot keep a prepared statement (it lives in one server
# session), so they are off with DB_PGBOUNCER=true and asking for both refuses to start; DB_PREPARED_STATEMENTS=false
# is client-side binding behind any other such pooler (`make test` runs its race suites a second time so).
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS", not PGBOUNCER)
if DB_PREPARED_STATEMENTS and PGBOUNCER:
    raise ImproperlyConfigured(
        "DB_PREPARED_STATEMENTS=true with DB_PGBOUNCER=true: PgBouncer 1.18 in transaction mode cannot keep "
        "server-side prepared statements; leave DB_PREPARED_STATEMENTS unset (off behind PgBouncer)"
    )
# After how many runs on one connection a statement is prepared (psycopg's default): the checkout's statements are
# prepared from a connection's sixth checkout; one-off statements (the admin's) never pay the extra round trip.
DB_PREPARE_THRESHOLD = 5
# A service transaction slower than this is logged as a warning (logger skincare.db.slow).
DB_SLOW_TRANSACTION_MS = env_int("DB_SLOW_TRANSACTION_MS", 1000, minimum=1)
# Django's check of a reused connection before every request: off, measured (docs/benchmarks.md#decisions: +11-22 %
# sold-out 409s/s without it). It costs a round trip (SELECT 1) at the start of every request that uses the
# database, even a checkout refused from memory; a connection idle for a while is checked instead
# (skincare/connections.py): a busy worker never pays, one that sat through a database restart reconnects.
CONN_HEALTH_CHECKS = False


def _database():
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        raise ImproperlyConfigured(
            "DATABASE_URL is not set: set it, or for development run `make db` (it starts the embedded PostgreSQL "
            f"and writes its DATABASE_URL to .env). {_DEVELOPMENT_HINT}".strip()
        )
    config = env.db_url_config(url)
    options = config.setdefault("OPTIONS", {})
    if not config.get("HOST") and "host" in options:  # Unix-socket URLs carry the directory as ?host=
        config["HOST"] = options.pop("host")
    # Waiting for a row lock is bounded: a request that cannot get its lock in time fails with 55P03 and becomes a
    # 503 with Retry-After instead of piling up behind a stuck transaction. Talking to PostgreSQL directly, both
    # bounds go in the libpq ``options`` startup parameter, so every statement is bounded: services, reads, the
    # admin, migrations. PgBouncer refuses that parameter, so DB_PGBOUNCER=true leaves it out: then every statement
    # runs with the role's defaults in the database, which `manage.py migrate` sets to the same two values (the
    # start-up check skincare.E014 refuses a pooled process without them), and each service transaction run by
    # skincare.db.retry_transient also sets both with SET LOCAL (which survives a transaction-mode pooler).
    if not PGBOUNCER:
        options.setdefault(
            "options", f"-c lock_timeout={DB_LOCK_TIMEOUT_MS} -c statement_timeout={DB_STATEMENT_TIMEOUT_MS}"
        )
    if DB_PREPARED_STATEMENTS:
        options["server_side_binding"] = True
        options["prepare_threshold"] = DB_PREPARE_THRESHOLD
    # Persistent connections per worker, not a pool per process (measured: docs/benchmarks.md#decisions).
    config["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60)
    config["CONN_HEALTH_CHECKS"] = CONN_HEALTH_CHECKS
    # No session state: server-side cursors (QuerySet.iterator) would need the same server connection across
    # transactions, which a transaction-mode pooler does not promise. (Prepared statements: DB_PREPARED_STATEMENTS
    # above; advisory locks, where used, must be pg_advisory_xact_lock.)
    config["DISABLE_SERVER_SIDE_CURSORS"] = True
    config.setdefault("TEST", {})["NAME"] = os.environ.get("DATABASE_TEST_NAME") or f"test_{config['NAME']}"
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
    # Ids in paths (skincare.validation.DatabaseIdConverter): 1 to 2^63 - 1, a PostgreSQL bigint.
    "PATH_CONVERTER_OVERRIDES": {"id": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# Domain settings: the sale (docs/configuration.md, "What an operator sets")
# An unpaid order's reservation lasts this long; then the sweeper cancels it and returns its units.
RESERVATION_TTL_SECONDS = env_int("RESERVATION_TTL_SECONDS", 1800, minimum=1)
# Open pending_payment orders one customer may hold at once (0 = no cap).
MAX_PENDING_ORDERS_PER_CUSTOMER = env_int("MAX_PENDING_ORDERS_PER_CUSTOMER", 5)
# Checkouts per customer per fixed window, e.g. "20/minute" (second, minute, hour, day); empty = no limit. Checked at
# start-up (skincare.E001).
CHECKOUT_RATE_LIMIT = env("CHECKOUT_RATE_LIMIT", default="")
# The shop's currency (ISO 4217 code): every order is written in it, the API shows it, and a payment event in any
# other currency is a mismatch, never a payment (payments.services). Checked at start-up (skincare.E012).
SHOP_CURRENCY = env("SHOP_CURRENCY", default="IDR")
# The payment gateway behind payment_url (payments/gateway.py): `sandbox` (the built-in page, PAYMENT_SANDBOX),
# `midtrans` (Snap) or `xendit` (Invoices); docs/runbooks/payments.md.
PAYMENT_GATEWAY = env_choice("PAYMENT_GATEWAY", "sandbox", ("sandbox", "midtrans", "xendit"))
# Payment pages created per second across every web process (payments.sessions.session_turn_take), so the gateway's
# rate limit is never what a buyer meets: Xendit's default stays within its published 10/s, Midtrans publishes none;
# 0 = not paced (the tests of other things, a gateway without a limit). The sandbox creates no pages.
PAYMENT_SESSIONS_PER_SECOND = env_int(
    "PAYMENT_SESSIONS_PER_SECOND", {"sandbox": 0, "midtrans": 10, "xendit": 8}[PAYMENT_GATEWAY], minimum=0
)
# The waiting room (docs/queue.md, waitingroom/): a queued product's default pace (admissions per second, the admin
# and flash_sale_setup --admit-per-second set each queue's own), how long before sale_starts_at its queue opens for
# joining, how long an admission lasts. A pace never exceeds the payment pages' (payments.E014): by default the lower.
QUEUE_ADMIT_PER_SECOND = env_int("QUEUE_ADMIT_PER_SECOND", min(10, PAYMENT_SESSIONS_PER_SECOND or 10), minimum=1)
QUEUE_OPENS_BEFORE_SECONDS = env_int("QUEUE_OPENS_BEFORE_SECONDS", 3600)
ADMISSION_TTL_SECONDS = env_int("ADMISSION_TTL_SECONDS", 120, minimum=1)
# The most units of a queued product one admission buys (the queue admits as many buyers as there are units).
QUEUE_UNITS_PER_ADMISSION = env_int("QUEUE_UNITS_PER_ADMISSION", 2, minimum=1)
PAYMENT_WEBHOOK_SECRET = env("PAYMENT_WEBHOOK_SECRET", default="")
# Where payment links point when the request's own address is not the public one.
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="")
MIDTRANS_SERVER_KEY = env("MIDTRANS_SERVER_KEY", default="")
MIDTRANS_SNAP_BASE_URL = env("MIDTRANS_SNAP_BASE_URL", default="https://app.sandbox.midtrans.com")
MIDTRANS_API_BASE_URL = env("MIDTRANS_API_BASE_URL", default="https://api.sandbox.midtrans.com")
# Production refuses Midtrans's sandbox base URLs (payments.E007) unless this is set (a staging shop).
MIDTRANS_ALLOW_SANDBOX = env_bool("MIDTRANS_ALLOW_SANDBOX", False)
# Every call to Midtrans is answered within this many seconds, whole (DNS, connect, TLS, request, every read), or
# given up (a session then answers 503 gateway_unavailable): payments.boundary.
MIDTRANS_TIMEOUT_SECONDS = env_int("MIDTRANS_TIMEOUT_SECONDS", 5, minimum=1)
# The gateway boundary of each process (payments.boundary): at most this many calls in flight (one more is refused
# at once); after this many failures in a row, no call for this many seconds (503 gateway_unavailable, Retry-After).
# A web worker serves WEB_THREADS requests at once (config/gunicorn.conf.py); a stalled gateway may hold fewer of
# them than that, or it would hold the whole worker: GATEWAY_MAX_CALLS must be below WEB_THREADS.
WEB_THREADS = web_threads()
GATEWAY_MAX_CALLS = env_int("GATEWAY_MAX_CALLS", WEB_THREADS // 2, minimum=1)
if GATEWAY_MAX_CALLS >= WEB_THREADS:
    raise ImproperlyConfigured(
        f"GATEWAY_MAX_CALLS ({GATEWAY_MAX_CALLS}) must be below WEB_THREADS ({WEB_THREADS}): calls waiting on a "
        "stalled gateway would hold every thread of a web worker (docs/configuration.md)"
    )
GATEWAY_BREAKER_FAILURES = env_int("GATEWAY_BREAKER_FAILURES", 5, minimum=1)
GATEWAY_BREAKER_SECONDS = env_int("GATEWAY_BREAKER_SECONDS", 30, minimum=1)
# A sweep asks the gateway about its due orders at once (GATEWAY_MAX_CALLS at a time) and waits at most this long for
# all the answers; an order still unanswered expires unconfirmed and is marked for reconcile_payments.
GATEWAY_SWEEP_SECONDS = env_int("GATEWAY_SWEEP_SECONDS", 30, minimum=1)
# A Snap session's custom_expiry and page_expiry end at least this long before the order's payment_expires_at
# (database clock): room for Midtrans's clock, a payment being finished on the page and its notification. An order
# with less time left gets no session (409 payment_window_closing).
MIDTRANS_EXPIRY_MARGIN_SECONDS = env_int("MIDTRANS_EXPIRY_MARGIN_SECONDS", 180, minimum=60)
# Xendit (payments/xendit.py): the secret key (the HTTP Basic user of every call), the callback verification token
# (x-callback-token), the API's address, the deadline of every call, and how long before the order's
# payment_expires_at its invoice ends (the same room as Midtrans's margin).
XENDIT_SECRET_KEY = env("XENDIT_SECRET_KEY", default="")
XENDIT_CALLBACK_TOKEN = env("XENDIT_CALLBACK_TOKEN", default="")
XENDIT_API_BASE_URL = env("XENDIT_API_BASE_URL", default="https://api.xendit.co")
XENDIT_TIMEOUT_SECONDS = env_int("XENDIT_TIMEOUT_SECONDS", 5, minimum=1)
XENDIT_EXPIRY_MARGIN_SECONDS = env_int("XENDIT_EXPIRY_MARGIN_SECONDS", 180, minimum=60)

# Limits and retention (docs/configuration.md: the defaults suit most shops)
# A server-side cart expires this long after its last change (database clock); it holds no stock meanwhile.
CART_TTL_SECONDS = env_int("CART_TTL_SECONDS", 1800, minimum=1)
# Expired and checked-out carts answer 410 / 409 this long, then prune_retention deletes them.
CART_RETENTION_SECONDS = env_int("CART_RETENTION_SECONDS", 86400)
# Open (unexpired) carts one customer may hold at once; another create answers 409 too_many_open_carts (0 = no cap).
MAX_OPEN_CARTS_PER_CUSTOMER = env_int("MAX_OPEN_CARTS_PER_CUSTOMER", 10)
# The most admissions one advance of a queue may grant at once (in seconds of its pace), and the bounds of a pass's
# poll_after.
QUEUE_MAX_BURST_SECONDS = env_int("QUEUE_MAX_BURST_SECONDS", 2, minimum=1)
QUEUE_POLL_MIN_SECONDS = env_int("QUEUE_POLL_MIN_SECONDS", 1, minimum=1)
# How old each process's copy of the queues' counters may be (one read per process per this many seconds, not per
# poll; waitingroom/counters.py).
QUEUE_COUNTERS_MAX_AGE_SECONDS = env_int("QUEUE_COUNTERS_MAX_AGE_SECONDS", 1)
# How often each web process writes the joins it answered, all in one statement (waitingroom/joins.py); 0: each join
# is written in its own request. A pass answered and not yet written is written at its next poll if its process dies.
QUEUE_JOIN_FLUSH_MS = env_int("QUEUE_JOIN_FLUSH_MS", 200, minimum=0)
# A client told poll_after = P_max sees an admission granted right after its poll at most P_max + the counters' age
# + P_min later: that must leave at least half the admission's TTL to check out. The default is the longest P_max
# that rule allows (58 s with the default TTL): far passes, which are most of a large crowd, poll as rarely as the
# admission's promise permits (docs/queue.md#polling).
QUEUE_POLL_MAX_SECONDS = env_int(
    "QUEUE_POLL_MAX_SECONDS",
    ADMISSION_TTL_SECONDS // 2 - QUEUE_COUNTERS_MAX_AGE_SECONDS - QUEUE_POLL_MIN_SECONDS,
    minimum=1,
)
if not (
    QUEUE_POLL_MIN_SECONDS <= QUEUE_POLL_MAX_SECONDS
    and 2 * (QUEUE_POLL_MAX_SECONDS + QUEUE_COUNTERS_MAX_AGE_SECONDS + QUEUE_POLL_MIN_SECONDS) <= ADMISSION_TTL_SECONDS
):
    raise ImproperlyConfigured(
        "QUEUE_POLL_MAX_SECONDS must be at least QUEUE_POLL_MIN_SECONDS, and QUEUE_POLL_MAX_SECONDS + "
        "QUEUE_COUNTERS_MAX_AGE_SECONDS + QUEUE_POLL_MIN_SECONDS at most half ADMISSION_TTL_SECONDS (a pass told to "
        "come back later than its admission lasts could miss its turn)"
    )
CHECKOUT_MAX_ITEMS = env_int("CHECKOUT_MAX_ITEMS", 20, minimum=1)
CHECKOUT_MAX_QTY = env_int("CHECKOUT_MAX_QTY", 100, minimum=1)
# How often a transaction that lost a deadlock or serialization race is retried from the start.
DB_TRANSIENT_RETRIES = env_int("DB_TRANSIENT_RETRIES", 3)
# Attempts of a checkout of an `optimistic` product whose version check keeps losing, before 409 stock_conflict.
INVENTORY_OPTIMISTIC_ATTEMPTS = env_int("INVENTORY_OPTIMISTIC_ATTEMPTS", 5, minimum=1)
PAYMENT_WEBHOOK_TOLERANCE_SECONDS = env_int("PAYMENT_WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1)
# Idempotency-Key records of checkouts are kept this long (then pruned by prune_retention).
IDEMPOTENCY_KEY_TTL_SECONDS = env_int("IDEMPOTENCY_KEY_TTL_SECONDS", 86400, minimum=1)
# Refusals stored under Idempotency-Keys, per customer: beyond the newest this many, older ones are forgotten.
IDEMPOTENCY_MAX_STORED_REFUSALS = env_int("IDEMPOTENCY_MAX_STORED_REFUSALS", 100)
# Applied webhook event ids are kept this long; a gateway redelivers for a few days at most.
PROCESSED_EVENTS_RETENTION_DAYS = env_int("PROCESSED_EVENTS_RETENTION_DAYS", 30, minimum=1)
# API tokens expire this many seconds after they are issued; unset = they never expire.
API_TOKEN_TTL_SECONDS = env_int("API_TOKEN_TTL_SECONDS", 0, minimum=1) or None
# The longest a worker remembers a valid token (no query per request). A revocation reaches every worker through
# the database's feed within about a second; this bounds any memory regardless (docs/reliability.md); 0 = look every
# token up.
API_TOKEN_CACHE_SECONDS = env_int("API_TOKEN_CACHE_SECONDS", 300)

# Development and tests only (docs/configuration.md)
# How long a worker remembers a product it saw sold out and refuses it without a query: 250 ms, the measured choice
# (docs/benchmarks.md#decisions; inventory/soldout.py never remembers longer). The test suite turns it off (0), so a
# test that restocks a product sells it at once.
# How old the public product page's stock and sale state may be (Cache-Control max-age and this process's memory of
# the read; 0 = read every time, tests). Never a checkout's: it reads its own.
PRODUCT_READ_MAX_AGE_SECONDS = env_int("PRODUCT_READ_MAX_AGE_SECONDS", 1)
SOLD_OUT_CACHE_MS = env_int("SOLD_OUT_CACHE_MS", 250)
if SOLD_OUT_CACHE_MS not in (0, 250):
    raise ImproperlyConfigured(
        f"SOLD_OUT_CACHE_MS must be 250 (the default) or 0 (off, tests), not {SOLD_OUT_CACHE_MS}"
    )
PAYMENT_SANDBOX = env_bool("PAYMENT_SANDBOX", False)
# The sandbox is a development tool: with DEBUG off it refuses to start (payments.E002) unless this demo-only opt-in
# is set (the Makefile's `make run` sets it).
PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG = env_bool("PAYMENT_SANDBOX_ALLOW_WITHOUT_DEBUG", False)
# Where the sandbox posts its signed webhook: a fixed address, never derived from the request's Host header.
PAYMENT_SANDBOX_WEBHOOK_URL = env(
    "PAYMENT_SANDBOX_WEBHOOK_URL", default=f"http://127.0.0.1:{env_int('PORT', 8000)}/v1/payments/webhook"
)

# Observability
# GET /metrics answers loopback clients only (never in production), unless METRICS_TOKEN is set: then
# `Authorization: Bearer <token>` from anywhere. With DJANGO_ENV=production it needs the token.
METRICS_TOKEN = env("METRICS_TOKEN", default="")
# One JSON line per request (logger skincare.access); off when a proxy's access log already has it.
ACCESS_LOG = env_bool("ACCESS_LOG", True)
LOG_FORMAT = env_choice("LOG_FORMAT", "json", ("json", "plain"))
LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
LOGGING = logs.logging_config(log_format=LOG_FORMAT, level=LOG_LEVEL)
# The release this process runs (the operator's label: a commit, an image tag). Every answer names it in an
# X-Release header (skincare.middleware.ReleaseHeaderMiddleware), so a client sees a rolling release arrive; unset, no
# header. Letters, digits and . _ + - only, at most 64: anything else refuses to start.
RELEASE_ID = env("RELEASE_ID", default="").strip()
if RELEASE_ID and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}", RELEASE_ID):
    raise ImproperlyConfigured(f"RELEASE_ID must be letters, digits and . _ + - (at most 64), not {RELEASE_ID!r}")

# Reverse proxies (comma-separated CIDRs, e.g. "127.0.0.1/32,10.0.0.0/8"; default none) whose X-Forwarded-For is
# believed: behind them the client address (admin login throttle, /metrics' loopback rule) is the right-most
# X-Forwarded-For entry that is not itself a trusted proxy. Without them the header is ignored.
TRUSTED_PROXIES = env.list("TRUSTED_PROXIES", default=[])

# Admin login throttling (skincare/login_throttle.py), failures within the window → 429: this many for one username
# from one address; from one address for any usernames; from the "unknown" address (no readable client address);
# for one username from everywhere (which blocks only addresses that have failed themselves).
ADMIN_LOGIN_MAX_FAILURES = env_int("ADMIN_LOGIN_MAX_FAILURES", 5, minimum=1)
ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("ADMIN_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1)
ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS = env_int("ADMIN_LOGIN_MAX_FAILURES_UNKNOWN_ADDRESS", 20, minimum=1)
ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME = env_int("ADMIN_LOGIN_MAX_FAILURES_PER_USERNAME", 100, minimum=1)
ADMIN_LOGIN_WINDOW_SECONDS = env_int("ADMIN_LOGIN_WINDOW_SECONDS", 900, minimum=1)

# Behind a TLS-terminating proxy: DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO (the proxy must set it to
# "https" and strip it from clients), so request.is_secure() and the HTTPS redirect see the original scheme.
_proxy_ssl_header = env("DJANGO_SECURE_PROXY_SSL_HEADER", default="")
if _proxy_ssl_header:
    SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header, "https")

if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    # Probes and the scraper talk plain HTTP to the instance itself, not through the TLS proxy.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", True)
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SESSION_COOKIE_HTTPONLY = True

# security.W002 looks for Django's XFrameOptionsMiddleware by its exact path; it is installed as
# skincare.middleware.XFrameOptionsMiddleware (a subclass that skips the JSON API), so browser pages still get
# X-Frame-Options: DENY (checked by skincare/tests/test_production.py).
SILENCED_SYSTEM_CHECKS = ["security.W002"]
