import logging

from django.db import connection
from django.http import JsonResponse

logger = logging.getLogger(__name__)


def healthz(request):
    """The process is up (no database access: a liveness probe must not fail because the database is slow)."""
    return JsonResponse({"status": "ok"})


def readyz(request):
    """The database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.exception("readiness check failed")
        return JsonResponse(
            {"status": "unavailable", "code": "database_unavailable", "error": "Database unreachable."}, status=503
        )
    return JsonResponse({"status": "ok"})
