"""What the sale board reads from the Prometheus metrics of :mod:`skincare.metrics` (the gauges the sweeper's
probe exports are in :mod:`backoffice.probemetrics`).

:func:`checkout_snapshot` reads the checkout counters and latency histogram the way ``/metrics`` does
(:func:`skincare.metrics.registry`): under gunicorn, every worker's mmap'ed file in ``PROMETHEUS_MULTIPROC_DIR`` of
*this instance*; elsewhere this process's registry. Reading takes no lock the checkout takes and writes nothing: a
worker's increment is a store to its own shared memory page, the reader opens and reads the files.
"""

import math
from typing import Any

from skincare import metrics

CHECKOUT_COUNTER = "skincare_checkout_requests"
CHECKOUT_HISTOGRAM = "skincare_checkout_duration_seconds"


def checkout_snapshot() -> dict[str, Any]:
    """Cumulative checkout outcomes and the latency histogram of this instance: ``{"outcomes": {code: n},
    "latency": {"buckets": [[le, cumulative count], ...], "count": n, "sum": s}, "scope": ...}``. Counters only
    grow (per worker); a board takes the difference of two snapshots for a rate."""
    outcomes: dict[str, float] = {}
    buckets: dict[float, float] = {}
    count = total = 0.0
    for family in metrics.registry().collect():
        if family.name == CHECKOUT_COUNTER:
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    outcome = sample.labels.get("outcome", metrics.OTHER)
                    outcomes[outcome] = outcomes.get(outcome, 0.0) + sample.value
        elif family.name == CHECKOUT_HISTOGRAM:
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + sample.value
                elif sample.name.endswith("_count"):
                    count += sample.value
                elif sample.name.endswith("_sum"):
                    total += sample.value
    ordered = [[le if math.isfinite(le) else "+Inf", n] for le, n in sorted(buckets.items())]
    return {
        "scope": "instance (all gunicorn workers)" if metrics.multiprocess_enabled() else "this process",
        "outcomes": {k: int(v) for k, v in sorted(outcomes.items())},
        "latency": {"buckets": ordered, "count": int(count), "sum": total},
    }


def histogram_quantile(q: float, buckets: list[list[Any]]) -> float | None:
    """Prometheus's ``histogram_quantile`` over cumulative ``[[le, count], ...]`` (ascending, ending with +Inf):
    linear interpolation inside the bucket the rank falls in; the highest finite bound when it falls in +Inf."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for le, cumulative in buckets:
        if cumulative >= rank:
            if le == "+Inf":
                return lower_bound
            upper = float(le)
            inside = cumulative - lower_count
            return upper if inside <= 0 else lower_bound + (upper - lower_bound) * (rank - lower_count) / inside
        lower_bound = float(le) if le != "+Inf" else lower_bound
        lower_count = cumulative
    return lower_bound
