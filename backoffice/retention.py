"""Retention: each app deletes its own short-lived rows with a ``*_prune()`` function beside the code that writes
them; ``manage.py prune_retention`` and the sweeper loop (``expire_reservations --loop``) call them all, here, by
name."""

import logging

from carts.services import carts_prune
from checkout.idempotency import idempotency_keys_prune
from payments.services import processed_events_prune
from skincare.services import api_token_invalidations_prune, rate_limit_counters_prune

logger = logging.getLogger(__name__)


def retention_prune() -> dict[str, int]:
    """Delete every app's rows past their retention window; returns rows deleted per kind, in this order."""
    results = {
        "carts": carts_prune(),
        "idempotency_keys": idempotency_keys_prune(),
        "processed_events": processed_events_prune(),
        "rate_limit_counters": rate_limit_counters_prune(),
        "api_token_invalidations": api_token_invalidations_prune(),
    }
    # Nothing pruned (the sweeper loop's usual pass, every few seconds in `make run`) is a debug line.
    level = logging.INFO if any(results.values()) else logging.DEBUG
    logger.log(level, "retention: %s", ", ".join(f"{name} {count}" for name, count in results.items()))
    return results
