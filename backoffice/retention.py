"""Retention: every app registers the pruning of its own short-lived rows here (from ``AppConfig.ready``), and
``manage.py prune_retention`` and the sweeper loop (``expire_reservations --loop``) run them all. The foundation
imports no app: the apps come to it."""

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

Pruner = Callable[[], int]

_pruners: dict[str, Pruner] = {}


def register_pruner(name: str, pruner: Pruner) -> None:
    """Register ``pruner`` (deletes expired rows, returns how many) under ``name``; registering again replaces it."""
    _pruners[name] = pruner


def prune_all() -> dict[str, int]:
    """Run every registered pruner; returns rows deleted per name."""
    results = {name: pruner() for name, pruner in sorted(_pruners.items())}
    # Nothing pruned (the sweeper loop's usual pass, every few seconds in `make run`) is a debug line.
    level = logging.INFO if any(results.values()) else logging.DEBUG
    logger.log(level, "retention: %s", ", ".join(f"{name} {count}" for name, count in results.items()) or "nothing")
    return results
