"""The service's settings with Django's connection health checks on: the one decision that the bench's "health
checks" row undoes (``config.settings.CONN_HEALTH_CHECKS``, docs/benchmarks.md#decisions)."""

from config.settings import *  # noqa: F403
from config.settings import DATABASES

DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
