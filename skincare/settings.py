"""Django settings for the skincare flash-sale backend. Everything deployment-specific comes from the environment."""

from pathlib import Path

import environ

from skincare import devdb

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DEBUG = env.bool("DJANGO_DEBUG", default=False)
# The fallback key is for local development and tests only; production must set DJANGO_SECRET_KEY.
SECRET_KEY = env("DJANGO_SECRET_KEY", default="dev-only-insecure-key-set-DJANGO_SECRET_KEY-in-production")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "skincare",
    "inventory",
    "orders",
    "payments",
]

# The browser-only ones (skincare.middleware) run for the admin and the sandbox page and are skipped on the JSON
# API and the probes, where they do nothing useful (measured in docs/benchmarks.md).
MIDDLEWARE = [
    "skincare.middleware.RequestBodyLimitMiddleware",
    "skincare.middleware.JsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "skincare.middleware.SessionMiddleware",
    "skincare.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "skincare.middleware.AuthenticationMiddleware",
    "skincare.middleware.MessageMiddleware",
    "skincare.middleware.XFrameOptionsMiddleware",
]

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


def _database():
    url = env("DATABASE_URL", default="") or devdb.url()
    if not url:
        raise environ.ImproperlyConfigured(
            "DATABASE_URL is not set and the embedded PostgreSQL is not running: run `make db` or set DATABASE_URL."
        )
    config = env.db_url_config(url)
    options = config.setdefault("OPTIONS", {})
    if not config.get("HOST") and "host" in options:  # Unix-socket URLs carry the directory as ?host=
        config["HOST"] = options.pop("host")
    # Waiting for a row lock is bounded: a request that cannot get its lock in time fails with
    # 55P03 and becomes a 503 with Retry-After instead of piling up behind a stuck transaction.
    lock_timeout = env.int("DB_LOCK_TIMEOUT_MS", default=5000)
    statement_timeout = env.int("DB_STATEMENT_TIMEOUT_MS", default=30000)
    options.setdefault("options", f"-c lock_timeout={lock_timeout} -c statement_timeout={statement_timeout}")
    config["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
    # A health check costs one extra round trip (SELECT 1) at the start of every request that reuses a
    # connection; it turns the first request after a database restart from a 500 into a reconnect.
    config["CONN_HEALTH_CHECKS"] = env.bool("DB_CONN_HEALTH_CHECKS", default=True)
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
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["skincare.api.JSONParser"],
    "EXCEPTION_HANDLER": "skincare.api.exception_handler",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "skincare.api.JsonOnlyNegotiation",
    "UNAUTHENTICATED_USER": None,
}

# Domain settings
RESERVATION_TTL_SECONDS = env.int("RESERVATION_TTL_SECONDS", default=1800)
CHECKOUT_MAX_ITEMS = env.int("CHECKOUT_MAX_ITEMS", default=20)
CHECKOUT_MAX_QTY = env.int("CHECKOUT_MAX_QTY", default=100)
# How long a worker remembers a product it saw sold out and refuses it without a query (ms, at most 250; 0 = off).
SOLD_OUT_CACHE_MS = env.int("SOLD_OUT_CACHE_MS", default=250)
# How often a transaction that lost a deadlock or serialization race is retried from the start.
DB_TRANSIENT_RETRIES = env.int("DB_TRANSIENT_RETRIES", default=3)
PAYMENT_WEBHOOK_SECRET = env("PAYMENT_WEBHOOK_SECRET", default="")
PAYMENT_WEBHOOK_TOLERANCE_SECONDS = env.int("PAYMENT_WEBHOOK_TOLERANCE_SECONDS", default=300)
PAYMENT_SANDBOX = env.bool("PAYMENT_SANDBOX", default=False)
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}
