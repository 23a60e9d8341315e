"""The waiting room's Prometheus metrics (in the foundation's registry: ``skincare.metrics.registry()``).

Counters are counted where they happen (joins in the web workers, admissions in the sweeper); the queue's
current counts by state (``waitingroom.models.PassState``) are read from the database when ``/metrics`` is scraped, by
:class:`QueueCollector`, so every worker and sweeper agrees on them. While the database cannot answer, a scrape
still succeeds without the queue's counts (``/metrics`` must keep working in an outage: the database alerts read it).
"""

import logging
from collections.abc import Iterator

from django.db import DatabaseError
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from waitingroom.selectors import queue_states

logger = logging.getLogger(__name__)

QUEUE_JOINS = Counter("skincare_queue_joins_total", "Passes created (POST /v1/products/<id>/queue, 201).")
QUEUE_ADMISSIONS = Counter(
    "skincare_queue_admissions_total", "Admissions granted by the advancer (rate() of it: admissions per second)."
)


class QueueCollector(Collector):
    """Per product with a queue: passes waiting, admitted (outstanding), used and expired, and the pace."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {
            name: GaugeMetricFamily(f"skincare_queue_{name}", help_text, labels=["product_id"])
            for name, help_text in (
                ("waiting", "Passes waiting for an admission."),
                ("admitted", "Admissions outstanding (not used, not expired)."),
                ("used", "Admissions used by a checkout."),
                ("expired", "Admissions that expired unused."),
                ("admit_per_second", "The queue's pace."),
                ("paused", "1 while admission is paused."),
            )
        }
        try:
            states = queue_states()
        except DatabaseError:
            logger.warning("queue counts left out of /metrics: the database did not answer", exc_info=True)
            states = []
        for state in states:
            label = [str(state.product_id)]
            families["waiting"].add_metric(label, state.waiting)
            families["admitted"].add_metric(label, state.admitted)
            families["used"].add_metric(label, state.used)
            families["expired"].add_metric(label, state.expired)
            families["admit_per_second"].add_metric(label, state.admit_per_second)
            families["paused"].add_metric(label, int(state.paused))
        yield from families.values()
