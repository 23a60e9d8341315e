"""API plumbing: Bearer-token auth, the one exception handler, the JSON parser and renderer.

Every error body is ``{"error": "<for humans>", "code": "<stable>", ...fields}`` (``skincare.errors.error_body``).
Domain errors declare their own status, code, fields and headers (``skincare.errors.DomainError``), so this module
imports nothing from the apps.
"""

import json
import logging
import re
import sys
from collections.abc import Iterable, Mapping
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework import parsers, renderers
from rest_framework.authentication import BaseAuthentication
from rest_framework.compat import LONG_SEPARATORS, SHORT_SEPARATORS
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import json as drf_json

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

    def authenticate(self, request: Request) -> tuple[User, None] | None:
        user = bearer_token_user(request.META)
        return None if user is None else (user, None)

    def authenticate_header(self, request: Request) -> str:
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
    """DRF's JSON parser, plus: a body nested so deep that Python's parser runs out of recursion
    (``RecursionError``, not a ``ValueError``) or deeper than ``MAX_JSON_DEPTH`` is a 400, not a 500. The body is
    decoded in one call rather than through a stream reader (DRF's own parser): the same text, the same errors."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
            data = json.loads(text, parse_constant=drf_json.strict_constant if self.strict else None)
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
    """DRF's JSON renderer, never indented: the ``Accept`` header is not read (:class:`JsonOnlyNegotiation`), so
    there is no ``indent=`` parameter to parse out of it on every response; one encoder, made once, writes every
    body (DRF's renderer makes one per response), in the same bytes."""

    def get_indent(self, accepted_media_type: str, renderer_context: Mapping[str, Any]) -> None:
        return None

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping[str, Any] | None = None
    ) -> bytes:
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


class JsonOnlyNegotiation(DefaultContentNegotiation):
    """Every API response is JSON, so the ``Accept`` header is not parsed (0.05 ms per request). Request bodies are
    still matched against the parsers by ``Content-Type`` (an unsupported one is a 415); a ``Content-Type`` that is
    exactly a parser's media type is that parser without parsing the header."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        content_type = request.content_type
        for parser in parsers:
            if parser.media_type == content_type:
                return parser
        return super().select_parser(request, parsers)


def authenticated_customer(request: Request) -> User:
    """The customer behind a request that passed ``IsAuthenticated`` (typed: never the anonymous user)."""
    user = request.user
    if not isinstance(user, User):
        raise drf_exceptions.NotAuthenticated()
    return user


def internal_error() -> Response:
    return Response(error_body("Internal server error.", "internal_error"), status=500)


def domain_error_response(exc: DomainError) -> Response:
    if not exc.expose:
        logger.error("domain error %s", exc.code, exc_info=exc)
        return internal_error()
    return Response(exc.body(), status=exc.http_status, headers=exc.headers)


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


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
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
        return Response(payload_too_large_body(), status=413)
    if isinstance(exc, SuspiciousOperation):  # too many form fields, a malformed multipart body, ...
        return Response(error_body("The request is malformed.", "bad_request"), status=400)
    if isinstance(exc, drf_exceptions.APIException):
        code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), "error")
        if isinstance(exc, drf_exceptions.ParseError):
            message = "Request body is not valid JSON."
        elif isinstance(exc, drf_exceptions.ValidationError):
            message = "The request is invalid."
        else:
            message = str(exc.detail)
        details = {"fields": exc.detail} if isinstance(exc, drf_exceptions.ValidationError) else {}
        response = Response(error_body(message, code, **details), status=exc.status_code)
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
