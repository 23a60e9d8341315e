"""Prometheus metrics: the definitions, how they are exposed (``GET /metrics``, the sweeper's metrics port) and the
outcome counting that API views opt into. Every definition lives here, in the foundation, so any app can count
without importing a higher app. Labels are bounded: outcomes come from the sets of :class:`OutcomeLabels`
(anything else is counted as ``other``) and SQLSTATEs only from the retryable/busy sets in :mod:`skincare.db`.

Under gunicorn, ``PROMETHEUS_MULTIPROC_DIR`` is set by ``config/gunicorn.conf.py`` before any worker imports
this module, so prometheus_client keeps each worker's values in an mmap'ed file in that directory and
:func:`render` sums them across the live workers (an increment is a write to shared memory, no lock, no I/O
syscall). Without it (tests, ``manage.py`` commands) values live in this process's default registry.
"""

import hmac
import ipaddress
import os
import threading
import time
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
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

from skincare.clientaddr import client_address
from skincare.errors import answer_codes, error_response, forbidden_response

OTHER = "other"
T = TypeVar("T")


class OutcomeLabels(AbstractSet[str]):
    """The bounded set of outcome labels of one endpoint: its own success outcomes, every error code an answer can
    carry (``skincare.errors.answer_codes``: the API layer's own and every code a ``DomainError`` class declares),
    nothing else. Computed at its first use, when a view counts an answer: by then the apps are loaded, and this
    module (imported by the apps) names none of them. A new error class is a label with no edit here."""

    def __init__(self, *successes: str) -> None:
        self.successes = frozenset(successes)
        self._labels: frozenset[str] | None = None

    def labels(self) -> frozenset[str]:
        if self._labels is None:
            self._labels = self.successes | answer_codes()
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
    "paid",
    "duplicate",
    "failed",
    "amount_mismatch",
    "currency_mismatch",
    "refund_required",
    "already_paid",
    "ignored",
    "unmatched",
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
    "POST /v1/payments/webhook and /v1/payments/midtrans/notification answers by outcome (paid, duplicate, failed, "
    "ignored, ..., or the error code).",
    ["outcome"],
)
# A payment page visit's outcome: ``redirected`` (to the gateway's page, new or stored) or the error ``code``
# (``payment_pages_paced``: the pace at work; ``gateway_unavailable``: the gateway slow, down or answering 429).
PAYMENT_PAGE_OUTCOMES = OutcomeLabels("redirected")
PAYMENT_PAGES = Counter(
    "skincare_payment_pages",
    "GET /v1/payments/pay/<link> answers by outcome (redirected, or the error code).",
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


def bearer_matches(header: str, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time over the whole value (an empty or a prefix
    token never matches)."""
    scheme, _, given = header.partition(" ")
    return bool(token) and scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def start_metrics_server(
    port: int, *, addr: str, scrape_collectors: Iterable[Collector] = ()
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """The sweeper's ``--metrics-port``, protected like the web server's ``/metrics``: with METRICS_TOKEN set it
    answers ``Authorization: Bearer <token>`` only; without it, it must be bound to a loopback address (the
    default, 127.0.0.1) and never in production, otherwise it refuses to start (ValueError). Returns the server and
    its thread, like prometheus_client's ``start_http_server``."""
    token = settings.METRICS_TOKEN
    if not token:
        try:
            loopback = ipaddress.ip_address(addr).is_loopback
        except ValueError:
            loopback = addr == "localhost"
        if settings.PRODUCTION or not loopback:
            raise ValueError(
                f"the metrics port on {addr} needs METRICS_TOKEN"
                + (" (always in production)" if settings.PRODUCTION else " unless it is bound to 127.0.0.1")
            )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if token and not bearer_matches(self.headers.get("Authorization", ""), token):
                self._answer(403, forbidden_response().content, "application/json")
                return
            body, content_type = render(scrape_collectors)
            self._answer(200, body, content_type)

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes are not worth a log line

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True)
    thread.start()
    return server, thread


def metrics_allowed(request: HttpRequest) -> bool:
    """With METRICS_TOKEN set: ``Authorization: Bearer <METRICS_TOKEN>`` from anywhere. Without: loopback clients
    only (the client address behind TRUSTED_PROXIES, so a reverse proxy on the same host does not make everyone
    loopback), and never in production, where a proxy that is not declared would still do exactly that."""
    token = settings.METRICS_TOKEN
    if token:
        return bearer_matches(request.headers.get("Authorization", ""), token)
    if settings.PRODUCTION:
        return False
    address = client_address(request)
    return address is not None and address.is_loopback


def metrics_view(request: HttpRequest, scrape_collectors: Iterable[Collector] = ()) -> HttpResponse:
    """GET /metrics. ``scrape_collectors`` (the URLconf's extra arguments) read their values at each scrape."""
    if request.method not in ("GET", "HEAD"):
        return error_response("Method not allowed.", "method_not_allowed", http_status=405)
    if not metrics_allowed(request):
        return forbidden_response()
    body, content_type = render(scrape_collectors)
    return HttpResponse(body, content_type=content_type)


# Each outcome counter's child per label, made at its first count: prometheus_client's ``labels()`` checks its
# arguments and takes a lock on every call, a count here is one lookup. Bounded as the labels are.
_OUTCOME_CHILDREN: dict[tuple[Counter, str], Counter] = {}


def outcome_child(counter: Counter, outcome: str) -> Counter:
    """``counter.labels(outcome=outcome)``, looked up once per counter and label."""
    child = _OUTCOME_CHILDREN.get((counter, outcome))
    if child is None:
        child = _OUTCOME_CHILDREN[(counter, outcome)] = counter.labels(outcome=outcome)
    return child


class OutcomeCountingMixin:
    """For an APIView: count every answer in ``outcome_counter{outcome}`` and time it in ``latency_histogram``.

    The outcome is the answer's ``code`` (error bodies), or for a 2xx the ``success_outcome`` (a fixed name)
    or the value of ``success_outcome_field`` in the body; anything outside ``allowed_outcomes`` is ``other``.
    """

    outcome_counter: ClassVar[Counter]
    allowed_outcomes: ClassVar[AbstractSet[str]]
    latency_histogram: ClassVar[Histogram | None] = None
    success_outcome: ClassVar[str] = "ok"
    success_outcome_field: ClassVar[str | None] = None

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        response = super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        self.count_answer(started, self.outcome(response))
        return response

    def count_answer(self, started: float, outcome: object) -> None:
        """Count one answer with ``outcome``, timed from ``started`` (``time.perf_counter()``)."""
        if self.latency_histogram is not None:
            self.latency_histogram.observe(time.perf_counter() - started)
        outcome_child(self.outcome_counter, bounded(outcome, self.allowed_outcomes)).inc()

    def outcome(self, response: HttpResponseBase) -> object:
        data = getattr(response, "data", None)
        if not isinstance(data, dict):
            return None
        if 200 <= response.status_code < 300:
            return data.get(self.success_outcome_field) if self.success_outcome_field else self.success_outcome
        return data.get("code")
