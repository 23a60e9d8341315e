"""API plumbing: Bearer-token auth, the JSON error format, and the one place where domain errors become
HTTP statuses. Every error body is ``{"error": "<for humans>", "code": "<stable>", ...details}``."""

import logging

from django.http import JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.response import Response

from inventory.exceptions import (
    InventoryCorrupted,
    ProductNotFound,
    StaleStockVersion,
    StockConflict,
    StockWouldGoNegative,
)
from orders.exceptions import OrderNotFound, OrderNotPending
from payments.exceptions import InvalidSignature
from skincare.errors import DomainError, InvalidInput, ServiceBusy

logger = logging.getLogger("skincare.api")

RETRY_AFTER_SECONDS = "1"

DOMAIN_STATUS = {
    InvalidInput: 400,
    InvalidSignature: 401,
    OrderNotFound: 404,
    StockConflict: 409,
    OrderNotPending: 409,
    StaleStockVersion: 409,
    StockWouldGoNegative: 409,
    ProductNotFound: 422,
    ServiceBusy: 503,
    InventoryCorrupted: 500,
}

DRF_CODES = {
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


def error_body(message, code, **details):
    return {"error": message, "code": code, **details}


def domain_error_response(exc):
    status = DOMAIN_STATUS.get(type(exc))
    if status is None:
        status = next((s for cls, s in DOMAIN_STATUS.items() if isinstance(exc, cls)), 500)
    if status >= 500 and not isinstance(exc, ServiceBusy):
        logger.error("domain error %s", exc.code, exc_info=exc)
        return Response(error_body("Internal server error.", "internal_error"), status=500)
    response = Response(error_body(exc.message, exc.code, **exc.details), status=status)
    if isinstance(exc, ServiceBusy):
        response["Retry-After"] = RETRY_AFTER_SECONDS
    return response


def exception_handler(exc, context):
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
    return Response(error_body("Internal server error.", "internal_error"), status=500)


def not_found(request, exception=None):
    return JsonResponse(error_body("Not found.", "not_found"), status=404)


def server_error(request):
    return JsonResponse(error_body("Internal server error.", "internal_error"), status=500)
