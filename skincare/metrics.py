"""Prometheus metrics: every definition lives here, in the foundation, so any app can count without importing a
higher app. Labels are bounded: outcomes come from the sets of :class:`OutcomeLabels` (anything else is counted as
``other``) and SQLSTATEs only from the retryable/busy sets in :mod:`skincare.db`.

Under gunicorn, ``PROMETHEUS_MULTIPROC_DIR`` is set by ``skincare/gunicorn.conf.py`` before any worker imports
this module, so prometheus_client keeps each worker's values in an mmap'ed file in that directory and
:func:`render` sums them across the live workers (an increment is a write to shared memory, no lock, no I/O
syscall). Without it (tests, ``manage.py`` commands) values live in this process's default registry.
"""

import os
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.registry import Collector

OTHER = "other"
T = TypeVar("T")


class OutcomeLabels(AbstractSet[str]):
    """The bounded set of outcome labels of one endpoint: its own success outcomes, every error code an answer can
    carry (the API layer's own, ``skincare.api.FRAMEWORK_CODES``, and every code a ``DomainError`` class declares,
    ``skincare.errors.declared_errors``), nothing else. Computed at its first use, when a view counts an answer: by
    then the apps are loaded, and this module (imported by the apps) names none of them. A new error class is a
    label with no edit here."""

    def __init__(self, *successes: str) -> None:
        self.successes = frozenset(successes)
        self._labels: frozenset[str] | None = None

    def labels(self) -> frozenset[str]:
        if self._labels is None:
            from skincare.api import FRAMEWORK_CODES
            from skincare.errors import declared_errors

            self._labels = self.successes | FRAMEWORK_CODES | frozenset(declared_errors())
        return self._labels

    def __contains__(self, label: object) -> bool:
        return label in self.labels()

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels())

    def __len__(self) -> int:
        return len(self.labels())

    @classmethod
    def _from_iterable(cls, labels: Iterable[T]) -> frozenset[T]:
        return frozenset(labels)  # what ``|``, ``&``, ``-`` of the set return


# The checkout endpoints' outcome (/v1/checkout and /v1/carts/<id>/checkout): ``created`` for a 201, else the code.
CHECKOUT_OUTCOMES = OutcomeLabels("created")
# The webhook's outcome: the ``status`` of a 200 answer (what the event did: ``payments.models.ProcessedEvent.Outcome``,
# which a test holds this list to) or the error ``code``.
WEBHOOK_OUTCOMES = OutcomeLabels(
    "paid", "duplicate", "failed", "amount_mismatch", "currency_mismatch", "refund_required", "already_paid"
)

CHECKOUT_REQUESTS = Counter(
    "skincare_checkout_requests",
    "POST /v1/checkout answers by outcome (the response's code; created for 201).",
    ["outcome"],
)
CHECKOUT_LATENCY = Histogram(
    "skincare_checkout_duration_seconds",
    "Time spent in the checkout view (authentication, validation, the transaction, rendering).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
PAYMENT_WEBHOOK_EVENTS = Counter(
    "skincare_payment_webhook_events",
    "POST /v1/payments/webhook answers by outcome (paid, duplicate, failed, ..., or the error code).",
    ["outcome"],
)
DB_RETRIES = Counter(
    "skincare_db_transaction_retries",
    "Service transactions run again after a deadlock (40P01), a serialization failure (40001), or a lost optimistic "
    "version check (version).",
    ["sqlstate"],
)
DB_BUSY = Counter(
    "skincare_db_busy",
    "Service transactions answered 503 busy: lock timeout (55P03), statement timeout (57014), or retries "
    "exhausted (the last SQLSTATE).",
    ["sqlstate"],
)
SWEEPER_EXPIRED_RESERVATIONS = Counter(
    "skincare_sweeper_expired_reservations",
    "Reservations expired by expire_reservations (units returned to stock).",
)
SWEEPER_CANCELLED_ORDERS = Counter(
    "skincare_sweeper_cancelled_orders", "Orders cancelled with payment_timeout by expire_reservations."
)
SWEEPER_BATCHES = Counter("skincare_sweeper_batches", "Non-empty batches committed by expire_reservations.")
SWEEPER_OLDEST_OVERDUE = Gauge(
    "skincare_sweeper_oldest_overdue_seconds",
    "How late the oldest order expired by the last sweep was (0 when nothing was due): the sweeper's lag.",
    multiprocess_mode="livemax",
)
SWEEPER_LAST_SWEEP = Gauge(
    "skincare_sweeper_last_sweep_timestamp_seconds",
    "Unix time the last sweep finished (alert when it stops moving).",
    multiprocess_mode="livemax",
)


def bounded(outcome: object, allowed: Iterable[str]) -> str:
    """``outcome`` when it is one of ``allowed``, else ``other``: a label never grows with client input."""
    return outcome if isinstance(outcome, str) and outcome in allowed else OTHER


def multiprocess_enabled() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def registry() -> CollectorRegistry:
    """The registry to expose: every live worker's values in multiprocess mode, this process's otherwise."""
    if not multiprocess_enabled():
        return REGISTRY
    collecting = CollectorRegistry()
    _multiprocess.MultiProcessCollector(collecting)
    return collecting


def render(scrape_collectors: Iterable[Collector] = ()) -> tuple[bytes, str]:
    """The text exposition format and its content type. ``scrape_collectors`` read their values now, at the scrape
    (the waiting room's queue counts, from the database): the caller that serves the scrape passes them."""
    body = generate_latest(registry())
    scraped = CollectorRegistry(auto_describe=False)
    for collector in scrape_collectors:
        scraped.register(collector)
    body += generate_latest(scraped)
    return body, CONTENT_TYPE_LATEST
