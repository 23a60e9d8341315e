"""Logging: request ids, one access line per request, JSON log lines, secret paths redacted.

Every log record gets ``request_id`` (the id of the request being served on this thread, or ``-``) from a
context variable set by :class:`RequestLogMiddleware`, the outermost middleware. With ``LOG_FORMAT=json`` (the
default) records are written one JSON object per line by python-json-logger.
"""

import logging
import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from gunicorn.glogging import Logger as GunicornLogger

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)


# Paths whose next segment is a credential: the payments app's signed links, the sandbox's page and the gateway's
# payment page (each a bearer secret for one order). Logs print them with that segment replaced (the application's
# access line, its log records and gunicorn's access and error logs).
SECRET_PATH_PREFIXES = ("/v1/payments/sandbox/", "/v1/payments/pay/")
_SECRET_PATH = re.compile("(" + "|".join(re.escape(p) for p in SECRET_PATH_PREFIXES) + r")[^/?#\s\"'<>]+")


def redact_secret_paths(text: str) -> str:
    """``text`` (a path, a request line, a Referer) with every secret path segment replaced by ``<redacted>``."""
    return _SECRET_PATH.sub(r"\1<redacted>", text)


class RedactSecretPathsFilter(logging.Filter):
    """On the console handler: every record's message with secret path segments redacted (Django's own loggers print
    ``request.path``, e.g. ``Forbidden (CSRF token missing.): /v1/payments/sandbox/<link>``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_secret_paths(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        request = getattr(record, "request", None)
        if request is not None:  # Django passes the request as an extra field; the JSON formatter prints its repr
            record.request = redact_secret_paths(repr(request))
        if record.exc_info and not record.exc_text:  # a traceback can quote the path too; formatters reuse exc_text
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_secret_paths(record.exc_text)
        return True


class RedactingGunicornLogger(GunicornLogger):
    """gunicorn's logger (``logger_class`` in config/gunicorn.conf.py) with secret path segments redacted from
    every access-log atom: the request line, the path, the Referer (a browser sends the link as the Referer of the
    page's own form post) and the Location of the redirect after a press; and from its error log (``Error handling
    request /v1/payments/sandbox/<link>``, a worker timeout's traceback) like the application's own records."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        if not any(isinstance(f, RedactSecretPathsFilter) for f in self.error_log.filters):  # one logger per name
            self.error_log.addFilter(RedactSecretPathsFilter())

    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        return {key: redact_secret_paths(v) if isinstance(v, str) else v for key, v in atoms.items()}


def is_sane_request_id(value: str | None) -> bool:
    """A client's X-Request-ID is kept when it is 1-200 characters of [A-Za-z0-9._-]; otherwise a new one is made."""
    return value is not None and _SANE_REQUEST_ID.fullmatch(value) is not None


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get() or "-"
        return True


JSON_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s"
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


def logging_config(*, log_format: str, level: str) -> dict[str, object]:
    """The LOGGING dict for settings: one console handler, JSON or plain."""
    formatter: dict[str, object]
    if log_format == "json":
        formatter = {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": JSON_FORMAT,
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        }
    else:
        formatter = {"format": PLAIN_FORMAT}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": "skincare.logs.RequestIdFilter"},
            "redact": {"()": "skincare.logs.RedactSecretPathsFilter"},
        },
        "formatters": {"main": formatter},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "main", "filters": ["request_id", "redact"]}
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Django's default config gives "django" a console handler of its own (with DEBUG): records go only
            # through ours, with its request ids and redaction.
            "django": {"handlers": [], "level": "INFO", "propagate": True},
            "django.request": {"level": "ERROR"},
        },
    }


access_logger = logging.getLogger("skincare.access")


def _ids(request: HttpRequest, response: HttpResponse) -> dict[str, int]:
    """The customer (authenticated user) and order a request concerned, where known."""
    found: dict[str, int] = {}
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "is_authenticated", False):
        found["customer_id"] = user.pk
    match = getattr(request, "resolver_match", None)
    order_id = match.kwargs.get("order_id") if match is not None else None
    data = getattr(response, "data", None)
    if order_id is None and isinstance(data, dict):
        order_id = data.get("order_id")
    if isinstance(order_id, int):
        found["order_id"] = order_id
    return found


class RequestLogMiddleware:
    """Outermost: takes the client's X-Request-ID when sane (else makes one), echoes it in the response, exposes it
    to every log record of the request, and writes one access line (method, path, status, duration, ids) unless
    ACCESS_LOG is off."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(REQUEST_ID_HEADER)
        request_id = given if given is not None and is_sane_request_id(given) else uuid.uuid4().hex
        request.request_id = request_id  # type: ignore[attr-defined]
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response[REQUEST_ID_HEADER] = request_id
            if settings.ACCESS_LOG:
                path = redact_secret_paths(request.path)  # a signed sandbox link is a secret
                access_logger.info(
                    "%s %s %s",
                    request.method,
                    path,
                    response.status_code,
                    extra={
                        "method": request.method,
                        "path": path,
                        "status": response.status_code,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                        **_ids(request, response),
                    },
                )
            return response
        finally:
            request_id_var.reset(token)
