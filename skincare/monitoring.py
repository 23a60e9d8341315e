"""GET /metrics (Prometheus text format) and the outcome counting that API views opt into."""

import hmac
import time
from typing import Any, ClassVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import Counter, Histogram
from rest_framework.response import Response
from rest_framework.views import APIView

from skincare import metrics
from skincare.clientaddr import client_address


def metrics_allowed(request: HttpRequest) -> bool:
    """With METRICS_TOKEN set: ``Authorization: Bearer <METRICS_TOKEN>`` from anywhere. Without: loopback clients
    only (the client address behind TRUSTED_PROXIES, so a reverse proxy on the same host does not make everyone
    loopback), and never in production, where a proxy that is not declared would still do exactly that."""
    token = settings.METRICS_TOKEN
    if token:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        return scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
    if settings.PRODUCTION:
        return False
    address = client_address(request)
    return address is not None and address.is_loopback


def metrics_view(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return JsonResponse({"error": "Method not allowed.", "code": "method_not_allowed"}, status=405)
    if not metrics_allowed(request):
        return JsonResponse({"error": "Forbidden.", "code": "forbidden"}, status=403)
    body, content_type = metrics.render()
    return HttpResponse(body, content_type=content_type)


class OutcomeCountingMixin:
    """For an APIView: count every answer in ``outcome_counter{outcome}`` and time it in ``latency_histogram``.

    The outcome is the answer's ``code`` (error bodies), or for a 2xx the ``success_outcome`` (a fixed name)
    or the value of ``success_outcome_field`` in the body; anything outside ``allowed_outcomes`` is ``other``.
    """

    outcome_counter: ClassVar[Counter]
    allowed_outcomes: ClassVar[frozenset[str]]
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
