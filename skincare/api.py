"""API plumbing: Bearer-token auth, what a view reads of a request (``ApiRequest``) and answers (``ApiResponse``),
the one JSON parser and renderer, the one exception handler. The request path that uses them is
``skincare.apiview.ApiView.dispatch``.

Every error body is ``{"error": "<for humans>", "code": "<stable>", ...fields}`` (``skincare.errors.error_body``).
Domain errors declare their own status, code, fields and headers (``skincare.errors.DomainError``), so this module
imports nothing from the apps.
"""

import json
import logging
import re
import sys
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.http.request import HttpHeaders
from rest_framework import exceptions as drf_exceptions
from rest_framework import parsers, renderers
from rest_framework.authentication import BaseAuthentication
from rest_framework.compat import LONG_SEPARATORS, SHORT_SEPARATORS
from rest_framework.request import is_form_media_type
from rest_framework.utils import json as drf_json
from rest_framework.utils.mediatypes import media_type_matches

from skincare import metrics
from skincare.db import is_busy, is_connection_failure, sqlstate
from skincare.errors import (
    DRF_CODES,
    DatabaseUnavailable,
    DomainError,
    ServiceBusy,
    error_body,
    error_response,
    forbidden_response,
)

logger = logging.getLogger("skincare.api")

# No request body of this service nests anywhere near this deep; a deeper one is refused before it is walked.
MAX_JSON_DEPTH = 64

# Issued tokens are 43 URL-safe characters; anything longer or outside printable ASCII (e.g. U+0000, which
# PostgreSQL text cannot store) cannot be a token: refused without a query.
MAX_TOKEN_LENGTH = 200
TOKEN_BYTES = re.compile(rb"[\x21-\x7e]*")  # printable ASCII but space, matched in C (not byte by byte in Python)


class BearerTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <token>``; tokens are issued with ``manage.py issue_token`` and stored as SHA-256
    digests (``skincare.models.ApiToken``). A token is looked up by its digest with one indexed query, then
    remembered by the worker for API_TOKEN_CACHE_SECONDS (``skincare.selectors``); expired or revoked tokens are 401."""

    keyword = b"bearer"

    def authenticate(self, request: HttpRequest) -> tuple[User, None] | None:
        user = bearer_token_user(request.META)
        return None if user is None else (user, None)

    def authenticate_header(self, request: HttpRequest) -> str:
        return 'Bearer realm="api"'


def bearer_token_user(meta: Mapping[str, Any]) -> User | None:
    """The user a request's ``Authorization: Bearer`` header (in ``meta``, a request's META) authenticates; None
    without Bearer credentials; AuthenticationFailed (401) for a malformed, unknown, expired or revoked token."""
    from skincare.selectors import api_token_user  # models are not importable while the settings load

    header = meta.get("HTTP_AUTHORIZATION", b"")
    if isinstance(header, str):
        header = header.encode("iso-8859-1")  # as DRF's get_authorization_header: WSGI headers are latin-1
    parts = header.split()
    if not parts or parts[0].lower() != BearerTokenAuthentication.keyword:
        return None  # no Bearer credentials: NotAuthenticated (401) if the view needs a user
    if len(parts) != 2:
        raise drf_exceptions.AuthenticationFailed("Invalid token header.")
    raw = parts[1]
    if len(raw) > MAX_TOKEN_LENGTH or not TOKEN_BYTES.fullmatch(raw):
        raise drf_exceptions.AuthenticationFailed("Invalid token.")
    user = api_token_user(token=raw.decode("ascii"))
    if user is None:
        raise drf_exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
    return user


def json_depth_exceeds(data: Any, limit: int) -> bool:
    """Whether parsed JSON nests deeper than ``limit`` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class JSONParser(parsers.JSONParser):
    """The API's one parser, as the views name it for the OpenAPI document: ``parse_json`` on the stream's bytes."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        return parse_json(stream.read(), encoding)


# The decoder ``json.loads(text, parse_constant=...)`` would make for every body (a JSONDecoder keeps no state between
# calls): NaN and Infinity refused, as DRF's strict parser.
_DECODER = json.JSONDecoder(parse_constant=drf_json.strict_constant)


def parse_json(body: bytes, encoding: str) -> Any:
    """A JSON body as DRF's parser reads it (strict: no NaN or Infinity), or ParseError (400), plus: a body nested so
    deep that Python's parser runs out of recursion (``RecursionError``, not a ``ValueError``) or deeper than
    ``MAX_JSON_DEPTH`` is a 400, not a 500. The bytes are decoded in one call rather than through a stream reader
    (DRF's parser): the same text, the same errors."""
    try:
        text = body.decode(encoding)
        data = _DECODER.decode(text)
    except RecursionError:
        raise drf_exceptions.ParseError("JSON nested too deeply.") from None
    except ValueError as exc:
        raise drf_exceptions.ParseError(f"JSON parse error - {exc}") from None
    # Each level of nesting opens with its own bracket: a text with no more brackets than the limit (counted in
    # C) cannot nest deeper, so only a body with more is walked.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth_exceeds(data, MAX_JSON_DEPTH):
        raise drf_exceptions.ParseError("JSON nested too deeply.")
    return data


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer, never indented (the ``Accept`` header is not read: every answer is JSON), one encoder,
    made once, writing every body (``render_json``; DRF's renderer makes one per response), in the same bytes. Named
    by the views for the OpenAPI document."""

    def get_indent(self, accepted_media_type: str, renderer_context: Mapping[str, Any]) -> None:
        return None

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping[str, Any] | None = None
    ) -> bytes:
        return render_json(data)


def render_json(data: Any) -> bytes:
    """The bytes of every API answer's body: DRF's JSON renderer's, compact (nothing for ``None``)."""
    if data is None:
        return b""
    text = _ENCODER.encode(data)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


# The encoder DRF's renderer would make for every response, with the renderer's settings (compact, not ASCII-escaped,
# no NaN): a JSONEncoder keeps no state between calls.
_ENCODER = JSONRenderer.encoder_class(
    ensure_ascii=JSONRenderer.ensure_ascii,
    allow_nan=not JSONRenderer.strict,
    separators=SHORT_SEPARATORS if JSONRenderer.compact else LONG_SEPARATORS,
)


class ApiRequest:
    """What an API view reads of its request: the user the bearer token authenticated (None without one), the JSON
    body (``data``, parsed when first read), the headers, the raw body and the cookies; and Django's request itself
    (``http``) for what takes one (a URL built for the client, a template)."""

    __slots__ = ("_data", "http", "user")

    def __init__(self, request: HttpRequest, user: User | None) -> None:
        self.http = request
        self.user = user
        self._data: Any = _UNREAD

    @property
    def data(self) -> Any:
        if self._data is _UNREAD:
            self._data = {}  # a body that cannot be parsed reads as empty after its error, as in DRF
            self._data = request_data(self.http)
        return self._data

    @property
    def headers(self) -> HttpHeaders:
        return self.http.headers

    @property
    def META(self) -> dict[str, Any]:  # Django's name
        return self.http.META

    @property
    def COOKIES(self) -> dict[str, str]:  # Django's name
        return self.http.COOKIES

    @property
    def body(self) -> bytes:
        return self.http.body


_UNREAD = object()


def request_data(request: HttpRequest) -> Any:
    """A request's body as DRF's ``request.data`` reads it with the one JSON parser: nothing sent (no
    ``Content-Length``) is empty (a form's empty ``QueryDict`` for a form's media type); a body of any other media
    type is 415 ``unsupported_media_type``; JSON that cannot be read is 400."""
    content_type = request.META.get("CONTENT_TYPE", request.META.get("HTTP_CONTENT_TYPE", ""))
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length == 0:
        if content_type and is_form_media_type(content_type):
            return QueryDict("", encoding=request.encoding)
        return {}
    if content_type != JSONParser.media_type and not media_type_matches(JSONParser.media_type, content_type):
        raise drf_exceptions.UnsupportedMediaType(content_type)
    return parse_json(request.body, request.encoding or settings.DEFAULT_CHARSET)


class ApiResponse(HttpResponse):
    """An API answer: ``data`` written as JSON when the answer is made (``render_json``), and kept beside the bytes
    for whoever reads the answer after the view (the outcome counters, the access log, tests)."""

    def __init__(self, data: Any = None, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        body = render_json(data)
        super().__init__(body, status=status, headers=headers, content_type="application/json")
        if not body:  # as DRF: an answer without a body (a 304) names no content type
            del self["Content-Type"]
        self.data = data


def authenticated_customer(request: ApiRequest) -> User:
    """The customer behind a request that passed ``IsAuthenticated`` (typed: never the anonymous user)."""
    user = request.user
    if not isinstance(user, User):
        raise drf_exceptions.NotAuthenticated()
    return user


def internal_error() -> ApiResponse:
    return ApiResponse(error_body("Internal server error.", "internal_error"), status=500)


def domain_error_response(exc: DomainError) -> ApiResponse:
    if not exc.expose:
        logger.error("domain error %s", exc.code, exc_info=exc)
        return internal_error()
    return ApiResponse(exc.body(), status=exc.http_status, headers=exc.headers)


def payload_too_large_body() -> dict[str, Any]:
    return error_body("Request body too large.", "payload_too_large", max_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def outage_error(exc: BaseException) -> DomainError | None:
    """The 503 that an exception outside the domain stands for, else None: a database that cannot be reached
    (wherever it surfaced: authentication, a middleware, a view), a retryable error raised by a service, or a lock
    or statement timeout that cut a read outside any service (the database's bounds, skincare.db)."""
    if isinstance(exc, (DatabaseUnavailable, ServiceBusy)):
        return exc
    if is_busy(exc):
        metrics.DB_BUSY.labels(sqlstate=sqlstate(exc)).inc()
        logger.warning("database busy: %s", exc)
        return ServiceBusy()
    if is_connection_failure(exc):
        logger.warning("database unavailable: %s", exc)
        return DatabaseUnavailable()
    return None


def exception_handler(exc: Exception, context: dict[str, Any]) -> ApiResponse:
    if isinstance(exc, DomainError):
        return domain_error_response(exc)
    # As DRF's own handler does: Django's 404 and 403 (e.g. ``?format=`` naming no renderer) are API errors.
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    outage = outage_error(exc)
    if outage is not None:  # e.g. the token lookup of authentication, outside any service
        return domain_error_response(outage)
    if isinstance(exc, RequestDataTooBig):
        return ApiResponse(payload_too_large_body(), status=413)
    if isinstance(exc, SuspiciousOperation):  # too many form fields, a malformed multipart body, ...
        return ApiResponse(error_body("The request is malformed.", "bad_request"), status=400)
    if isinstance(exc, drf_exceptions.APIException):
        code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), "error")
        if isinstance(exc, drf_exceptions.ParseError):
            message = "Request body is not valid JSON."
        elif isinstance(exc, drf_exceptions.ValidationError):
            message = "The request is invalid."
        else:
            message = str(exc.detail)
        details = {"fields": exc.detail} if isinstance(exc, drf_exceptions.ValidationError) else {}
        response = ApiResponse(error_body(message, code, **details), status=exc.status_code)
        if isinstance(exc, (drf_exceptions.NotAuthenticated, drf_exceptions.AuthenticationFailed)):
            response.status_code = 401
            response["WWW-Authenticate"] = 'Bearer realm="api"'
        return response
    # Anything else is a bug or an outage: log everything, tell the client nothing about internals.
    logger.error("unhandled error in %s", context.get("view").__class__.__name__, exc_info=exc)
    return internal_error()


def domain_error_json(exc: DomainError) -> JsonResponse:
    """The same answer as ``domain_error_response``, for plain Django views and middleware."""
    response = JsonResponse(exc.body(), status=exc.http_status)
    for name, value in exc.headers.items():
        response[name] = value
    return response


def payload_too_large() -> JsonResponse:
    return JsonResponse(payload_too_large_body(), status=413)


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response("Not found.", "not_found", http_status=404)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    if isinstance(exception, RequestDataTooBig):
        return payload_too_large()
    return error_response("The request is malformed.", "bad_request", http_status=400)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return forbidden_response()


def csrf_failure(request: HttpRequest, reason: str = "") -> JsonResponse:
    return error_response("CSRF verification failed.", "csrf_failed", http_status=403)


def server_error(request: HttpRequest) -> JsonResponse:
    # Django calls this from inside its ``except`` block, so the exception is at hand: an outage that surfaced
    # in a plain view or in a middleware (session or user lookup) is a 503, never a 500.
    exc = sys.exc_info()[1]
    outage = outage_error(exc) if exc is not None else None
    if outage is not None:
        return domain_error_json(outage)
    return error_response("Internal server error.", "internal_error", http_status=500)
