import logging

from django.db import connection
from django.http import HttpRequest, JsonResponse

from skincare.errors import DatabaseUnavailable, error_body

logger = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up (no database access: a liveness probe must not fail because the database is slow)."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """The database answers. Otherwise 503 ``database_unavailable`` with ``Retry-After``, like every endpoint."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.exception("readiness check failed")
        error = DatabaseUnavailable()
        response = JsonResponse(
            {"status": "unavailable", **error_body(error.message, error.code)}, status=error.http_status
        )
        for name, value in error.headers.items():
            response[name] = value
        return response
    return JsonResponse({"status": "ok"})
