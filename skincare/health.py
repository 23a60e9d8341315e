import logging

from django.db import connection
from django.http import HttpRequest, JsonResponse

from skincare.errors import DatabaseUnavailable, error_response

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
        return error_response(
            error.message,
            error.code,
            http_status=error.http_status,
            retry_after=error.retry_after,
            status="unavailable",
        )
    return JsonResponse({"status": "ok"})
