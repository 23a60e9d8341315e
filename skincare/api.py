"""API plumbing: Bearer-token auth, the JSON error format, and the one exception handler.

Every error body is ``{"error": "<for humans>", "code": "<stable>", ...details}``. Domain errors declare their
own status, code and headers (``skincare.errors.DomainError``), so this module imports nothing from the apps.
"""

import logging
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from skincare.errors import DomainError

logger = logging.getLogger("skincare.api")

DRF_CODES: dict[type[drf_exceptions.APIException], str] = {
    drf_exceptions.ParseError: "malformed_json",
    drf_exceptions.AuthenticationFailed: "unauthorized",
    drf_exceptions.NotAuthenticated: "unauthorized",
    drf_exceptions.PermissionDenied: "forbidden",
    drf_exceptions.NotFound: "not_found",
    drf_exceptions.MethodNotAllowed: "method_not_allowed",
    drf_exceptions.UnsupportedMediaType: "unsupported_media_type",
    drf_exceptions.NotAcceptable: "not_acceptable",
    drf_exceptions.Throttled: "throttled",
    drf_exceptions.ValidationError: "invalid_request",
}


class BearerTokenAuthentication(TokenAuthentication):
    """``Authorization: Bearer <token>``; tokens are issued with ``manage.py issue_token``."""

    keyword = "Bearer"


class JsonOnlyNegotiation(DefaultContentNegotiation):
    """Every API response is JSON, so the ``Accept`` header is not parsed (0.05 ms per request). Request bodies are
    still matched against the parsers by ``Content-Type`` (an unsupported one is a 415)."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


def authenticated_customer(request: Request) -> User:
    """The customer behind a request that passed ``IsAuthenticated`` (typed: never the anonymous user)."""
    user = request.user
    if not isinstance(user, User):
        raise drf_exceptions.NotAuthenticated()
    return user


def error_body(message: str, code: str, **details: Any) -> dict[str, Any]:
    return {"error": message, "code": code, **details}


def internal_error() -> Response:
    return Response(error_body("Internal server error.", "internal_error"), status=500)


def domain_error_response(exc: DomainError) -> Response:
    if not exc.expose:
        logger.error("domain error %s", exc.code, exc_info=exc)
        return internal_error()
    return Response(error_body(exc.message, exc.code, **exc.details), status=exc.http_status, headers=exc.headers)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    if isinstance(exc, DomainError):
        return domain_error_response(exc)
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


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("Not found.", "not_found"), status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body("Internal server error.", "internal_error"), status=500)
