"""How the API renders a timestamp: ISO 8601 with ``Z`` for UTC (``2026-12-01T13:00:00Z``), everywhere."""

from datetime import datetime


def utc_z(value: datetime) -> str:
    """``value`` as ISO 8601, ``Z`` for a UTC offset (the database and Django hand out UTC: ``TIME_ZONE = "UTC"``)."""
    return value.isoformat().replace("+00:00", "Z")
