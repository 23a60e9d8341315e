"""GET /metrics (Prometheus text format) and the outcome counting that API views opt into."""

import hmac
import ipaddress
import threading
import time
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import Counter, Histogram
from prometheus_client.registry import Collector
from rest_framework.response import Response
from rest_framework.views import APIView

from skincare import metrics
from skincare.clientaddr import client_address


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
    its thread, like prometheus_client's ``start_http_server``. ``scrape_collectors``: as for :func:`metrics_view`."""
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
                self._answer(403, b'{"error": "Forbidden.", "code": "forbidden"}', "application/json")
                return
            body, content_type = metrics.render(scrape_collectors)
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
        return JsonResponse({"error": "Method not allowed.", "code": "method_not_allowed"}, status=405)
    if not metrics_allowed(request):
        return JsonResponse({"error": "Forbidden.", "code": "forbidden"}, status=403)
    body, content_type = metrics.render(scrape_collectors)
    return HttpResponse(body, content_type=content_type)


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
        if self.latency_histogram is not None:
            self.latency_histogram.observe(time.perf_counter() - started)
        self.outcome_counter.labels(outcome=metrics.bounded(self.outcome(response), self.allowed_outcomes)).inc()
        return response

    def outcome(self, response: Response) -> object:
        data = getattr(response, "data", None)
        if not isinstance(data, dict):
            return None
        if 200 <= response.status_code < 300:
            return data.get(self.success_outcome_field) if self.success_outcome_field else self.success_outcome
        return data.get("code")


class InstrumentedAPIView(OutcomeCountingMixin, APIView):
    """An APIView whose answers are counted by outcome (set ``outcome_counter`` and ``allowed_outcomes``)."""
