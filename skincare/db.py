"""Database helpers shared by every app: the transaction guard, transient-error retries, the database clock."""

import functools
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime
from typing import ParamSpec, TypeVar

from django.conf import settings
from django.db import OperationalError, connection, models, transaction

from skincare.errors import ServiceBusy

logger = logging.getLogger(__name__)

# A transaction that lost a deadlock or a serialization race can simply be run again from the start.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
# Waited too long for a lock or a statement: the caller should come back later (503 + Retry-After).
BUSY_SQLSTATES = frozenset({"55P03", "57014"})


P = ParamSpec("P")
R = TypeVar("R")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database exception raised through Django, or None."""
    cause: BaseException | None = exc
    while cause is not None:
        code = getattr(cause, "sqlstate", None)
        if code:
            return code
        cause = cause.__cause__
    return None


def require_transaction() -> None:
    """Refuse to take row locks outside a transaction: in autocommit they would be released at once."""
    if not connection.in_atomic_block:
        raise RuntimeError("row locks must be taken inside transaction.atomic()")


def retry_transient(func: Callable[P, R]) -> Callable[P, R]:
    """Run a whole ``@transaction.atomic`` service again when PostgreSQL reports a deadlock or serialization
    failure (these can surface at COMMIT, so the retry wraps the entire transaction), and turn lock and
    statement timeouts into :class:`ServiceBusy`. Inside an outer transaction nothing can be retried, so
    the error is passed on for the outermost caller to handle.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        attempts = settings.DB_TRANSIENT_RETRIES + 1
        for attempt in range(1, attempts + 1):
            try:
                return func(*args, **kwargs)
            except OperationalError as exc:
                code = sqlstate(exc)
                if connection.in_atomic_block:
                    raise
                if code in BUSY_SQLSTATES:
                    logger.warning("%s: database busy (%s)", func.__qualname__, code)
                    raise ServiceBusy() from exc
                if code not in RETRYABLE_SQLSTATES:
                    raise
                if attempt == attempts:
                    logger.warning("%s: gave up after %d attempts (%s)", func.__qualname__, attempts, code)
                    raise ServiceBusy() from exc
                logger.info("%s: retrying after %s (attempt %d)", func.__qualname__, code, attempt)
                time.sleep(random.uniform(0, 0.01 * attempt))  # noqa: S311 - jittered backoff, not crypto
        raise AssertionError("unreachable")

    return wrapper


class TransactionNow(models.Func):
    """PostgreSQL's ``now()``: the start time of the current transaction, by the database's clock.
    (Django's ``Now()`` compiles to ``STATEMENT_TIMESTAMP()``; expiry decisions here use ``now()``, so every
    statement of one transaction sees the same instant.)"""

    template = "now()"
    output_field = models.DateTimeField()


def db_now() -> datetime:
    """The database's clock (``now()``: inside a transaction, the transaction's start time)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


__all__ = ["TransactionNow", "db_now", "require_transaction", "retry_transient", "sqlstate", "transaction"]
