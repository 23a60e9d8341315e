"""Middleware plumbing. The JSON API (``/v1/`` and the probes) needs none of the browser middleware: sessions,
messages, the authentication middleware (the API authenticates by token), clickjacking headers, APPEND_SLASH
redirects. ``browser_only(M)`` runs middleware ``M`` for browser pages (the admin, the sandbox payment page) and
skips it on API paths, which saves about 0.05 ms of Python per API request (docs/benchmarks.md).

Only middleware that work entirely in ``__call__`` (``process_request``/``process_response``) can be wrapped:
hooks that Django collects from the middleware instance (``process_view``, ``process_exception``,
``process_template_response``) would still run on API paths, so such classes are refused. CSRF and security
middleware stay in the chain for every path.

Two middleware must hold for every URL, API views or not: the body size limit (``RequestBodyLimitMiddleware``)
and JSON errors for plain views, including the answer to a database outage (API views answer outages through
``skincare.api.exception_handler``).
"""

from collections.abc import Callable
from http import HTTPStatus

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from skincare.api import domain_error_json, outage_error, payload_too_large
from skincare.errors import error_response

API_PREFIXES = ("/v1/", "/healthz", "/readyz", "/metrics")
BROWSER_PAGES_UNDER_API = ("/v1/payments/sandbox/",)
HIDDEN_HOOKS = ("process_view", "process_exception", "process_template_response")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES) and not path.startswith(BROWSER_PAGES_UNDER_API)


def browser_only(middleware_class: type) -> type:
    hidden = [hook for hook in HIDDEN_HOOKS if hasattr(middleware_class, hook)]
    if hidden:
        raise TypeError(f"{middleware_class.__name__} has {hidden}: it cannot be skipped per path by a wrapper")

    class BrowserOnly(middleware_class):  # type: ignore[valid-type,misc]
        """A subclass, so that Django's admin checks still find the middleware they require."""

        def __call__(self, request: HttpRequest) -> HttpResponseBase:
            if is_api_path(request.path_info):
                return self.get_response(request)
            return super().__call__(request)

    BrowserOnly.__name__ = BrowserOnly.__qualname__ = f"BrowserOnly{middleware_class.__name__}"
    return BrowserOnly


def _browser(path: str) -> type:
    from django.utils.module_loading import import_string

    return browser_only(import_string(path))


SessionMiddleware = _browser("django.contrib.sessions.middleware.SessionMiddleware")
CommonMiddleware = _browser("django.middleware.common.CommonMiddleware")
AuthenticationMiddleware = _browser("django.contrib.auth.middleware.AuthenticationMiddleware")
MessageMiddleware = _browser("django.contrib.messages.middleware.MessageMiddleware")
XFrameOptionsMiddleware = _browser("django.middleware.clickjacking.XFrameOptionsMiddleware")


class ReleaseHeaderMiddleware:
    """Every answer, whatever gave it, names the release that served it (``X-Release``, settings.RELEASE_ID) when one
    is set: during a rolling release a client sees which instances run the new one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if settings.RELEASE_ID:
            response.headers["X-Release"] = settings.RELEASE_ID
        return response


class RequestBodyLimitMiddleware:
    """Refuse a body whose declared length is over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` with 413
    ``payload_too_large`` before anything reads it. (Django enforces that limit only when ``request.body`` is
    read, and a streamed body is read without it.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # Django reads no body at all when the header is not a number
        if limit is not None and length > limit:
            return payload_too_large()
        return self.get_response(request)


# Codes for the empty error responses Django builds itself (405 of a class-based view, for one).
STATUS_CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


class JsonErrorsMiddleware:
    """Errors of plain Django views (readyz, admin, sandbox) are JSON too.

    A database outage in a view answers 503 ``database_unavailable`` with ``Retry-After`` instead of a 500 (an
    outage raised by a middleware, such as the session or user lookup, never reaches a view: ``handler500``,
    ``skincare.api.server_error``, answers it the same way). An error response that Django built without a body
    (405 from a class-based view) gets the JSON error body."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if 400 <= response.status_code < 500 and not response.streaming and not response.content:
            code = STATUS_CODES.get(response.status_code, "error")
            message = HTTPStatus(response.status_code).phrase + "."
            replacement = error_response(message, code, http_status=response.status_code)
            for name in ("Allow", "Retry-After", "WWW-Authenticate"):
                if name in response:
                    replacement[name] = response[name]
            return replacement
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        outage = outage_error(exception)
        return None if outage is None else domain_error_json(outage)
