"""Request ids and JSON log lines.

Every log record gets ``request_id`` (the id of the request being served on this thread, or ``-``) from a
context variable set by :class:`skincare.requestlog.RequestLogMiddleware`. With ``LOG_FORMAT=json`` (the default)
records are written one JSON object per line by python-json-logger.
"""

import logging
import re
from contextvars import ContextVar
from typing import Any

from gunicorn.glogging import Logger as GunicornLogger

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)


# Paths whose next segment is a credential: the payments app's signed sandbox link (a bearer secret for one order).
# Logs print them with that segment replaced (the application's access line and gunicorn's access log).
SECRET_PATH_PREFIXES = ("/v1/payments/sandbox/",)
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
    """gunicorn's logger (``logger_class`` in skincare/gunicorn.conf.py) with secret path segments redacted from
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
