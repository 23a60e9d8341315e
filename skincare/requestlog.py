"""Request ids and one access log line per request (the outermost middleware)."""

import logging
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from skincare.logs import REQUEST_ID_HEADER, is_sane_request_id, redact_secret_paths, request_id_var

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
