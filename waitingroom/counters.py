"""Each process's view of every queue's counters, at most QUEUE_COUNTERS_MAX_AGE_SECONDS old (docs/queue.md#polling).

A waiting pass's answer needs only its own position (carried by its signed pass, ``waitingroom.passtoken``) and its
queue's serving counter, pace, pause, sale window and stock. Those are read for every queue at once, by one
statement, at most once per QUEUE_COUNTERS_MAX_AGE_SECONDS per process, and kept with the database's clock (so a
process's own clock never decides the opening): polls between two reads cost no statement. Admission, its use at
checkout and its expiry stay exact in the database (``waitingroom.services``, ``waitingroom.admission``).
"""

import time
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from inventory.selectors import STOCK_SUM_SQL

# Every queue's counters, its product's sale window and stock, and the database's clock, all in seconds since the
# epoch: one statement for every queue (a shop runs a handful at once).
QUEUE_COUNTERS_SQL = f"""
SELECT q.product_id, q.admit_per_second, q.paused, q.admitted_through,
       extract(epoch FROM p.sale_starts_at)::float8, extract(epoch FROM p.sale_ends_at)::float8,
       COALESCE(stock.available_stock, 0), COALESCE(stock.reserved_stock, 0), extract(epoch FROM now())::float8
FROM product_queues q
JOIN products p ON p.id = q.product_id
{STOCK_SUM_SQL}
"""


@dataclass(frozen=True)
class QueueCounters:
    """One queue as a process last read it. ``read_at``: the database's clock then; ``read_monotonic``: this
    process's monotonic clock then (their sum with the elapsed time is the database's clock now)."""

    product_id: int
    admit_per_second: int
    paused: bool
    admitted_through: int
    sale_starts_at: float | None
    sale_ends_at: float | None
    available: int
    reserved: int
    read_at: float
    read_monotonic: float

    def db_now(self) -> float:
        """The database's clock now, from the one read and this process's monotonic clock since."""
        return self.read_at + (time.monotonic() - self.read_monotonic)

    def seconds_to_start(self) -> float | None:
        """Seconds until the sale opens (None once it has, or without a start)."""
        if self.sale_starts_at is None:
            return None
        left = self.sale_starts_at - self.db_now()
        return left if left > 0 else None

    def sale_ended(self) -> bool:
        return self.sale_ends_at is not None and self.sale_ends_at <= self.db_now()

    def sold_out(self) -> bool:
        """No unit can lead to a purchase any more: the sale ended, or nothing is available and nothing reserved."""
        return self.sale_ended() or (self.available <= 0 and self.reserved <= 0)


_counters: dict[int, QueueCounters] = {}
_read_monotonic: float | None = None


def queue_counters(*, product_id: int) -> QueueCounters | None:
    """The product's queue counters, at most QUEUE_COUNTERS_MAX_AGE_SECONDS old; None when it has no queue."""
    global _counters, _read_monotonic
    now = time.monotonic()
    if _read_monotonic is None or now - _read_monotonic >= settings.QUEUE_COUNTERS_MAX_AGE_SECONDS:
        with connection.cursor() as cursor:
            cursor.execute(QUEUE_COUNTERS_SQL)
            rows = cursor.fetchall()
        now = time.monotonic()
        _counters = {}
        for pid, pace, paused, through, starts, ends, available, reserved, db_now in rows:
            _counters[pid] = QueueCounters(pid, pace, paused, through, starts, ends, available, reserved, db_now, now)
        _read_monotonic = now
    return _counters.get(product_id)


def queue_counters_forget() -> None:
    """Drop this process's counters: the next poll reads them again (after ops change a queue in this process)."""
    global _counters, _read_monotonic
    _counters, _read_monotonic = {}, None
