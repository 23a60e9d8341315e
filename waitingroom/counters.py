"""Each process's view of every queue's counters, at most QUEUE_COUNTERS_MAX_AGE_SECONDS old (docs/queue.md#polling).

A waiting pass's answer needs only its own position (carried by its signed pass, ``waitingroom.passtoken``) and its
queue's serving counter, pace, pause, sale window and stock. Those are read for every queue at once, by one
statement, at most once per QUEUE_COUNTERS_MAX_AGE_SECONDS per process, and kept with the database's clock (so a
process's own clock never decides the opening): polls between two reads cost no statement. Admission, its use at
checkout and its expiry stay exact in the database (``waitingroom.services``, ``waitingroom.admission``).

A pass signed before the opening carries no position. The advance places the whole crowd at once, so the same read
also brings each queue's ``positioned_through``; when a queue placed passes this process has not read, one more
statement reads their positions for every such queue (:data:`PLACEMENTS_SQL`) into :class:`Placements`, and such a
pass's poll takes its position from there. At most :data:`PLACEMENTS_HELD` positions per queue are held, those
nearest the serving counter; a pass beyond them, or placed since the last read, is read from the database.
"""

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from inventory.selectors import STOCK_SUM_SQL

# Every queue's counters, its product's sale window and stock, and the database's clock, all in seconds since the
# epoch: one statement for every queue (a shop runs a handful at once). ``created_us`` (the queue's creation instant,
# whole microseconds) tells a re-created queue (``flash_sale_setup --queue``: its positions start again at 1) from the
# one this process read before, and a signed pass of an earlier queue from one of this queue.
QUEUE_COUNTERS_SQL = f"""
SELECT q.product_id, p.is_active, q.admit_per_second, q.paused, q.admitted_through, q.positioned_through,
       (extract(epoch FROM q.created_at) * 1000000)::bigint,
       extract(epoch FROM p.sale_starts_at)::float8, extract(epoch FROM p.sale_ends_at)::float8,
       COALESCE(stock.available_stock, 0), COALESCE(stock.reserved_stock, 0), extract(epoch FROM now())::float8
FROM product_queues q
JOIN products p ON p.id = q.product_id
{STOCK_SUM_SQL}
"""

# The passes placed in each queue's range of positions (after, through], for every queue given at once: a range scan
# of the (product_id, position) unique index per queue.
PLACEMENTS_SQL = """
SELECT qp.product_id, qp.id, qp.position
FROM unnest(%(product_ids)s::bigint[], %(after)s::bigint[], %(through)s::bigint[]) AS r(product_id, after, through)
JOIN queue_passes qp ON qp.product_id = r.product_id AND qp.position > r.after AND qp.position <= r.through
ORDER BY qp.product_id, qp.position
"""

# The most positions a process holds per queue: 50,000 take about 6 MB of its memory (docs/queue.md#polling).
PLACEMENTS_HELD = 50_000


@dataclass(frozen=True)
class QueueCounters:
    """One queue as a process last read it. ``read_at``: the database's clock then; ``read_monotonic``: this
    process's monotonic clock then, halfway through the read (their sum with the elapsed time is the database's clock
    now, within ``read_error`` seconds: half the read's round trip)."""

    product_id: int
    is_active: bool
    admit_per_second: int
    paused: bool
    admitted_through: int
    positioned_through: int
    created_us: int
    sale_starts_at: float | None
    sale_ends_at: float | None
    available: int
    reserved: int
    read_at: float
    read_monotonic: float
    read_error: float

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


@dataclass
class Placements:
    """The positions this process read of one queue's passes: those in (the serving counter, ``through``], by pass
    id, and the same pass ids in position order (so the admitted ones are dropped from the front)."""

    created_us: int
    through: int = 0
    positions: dict[int, int] = field(default_factory=dict)
    in_order: deque[int] = field(default_factory=deque)

    def drop_admitted(self, admitted_through: int) -> None:
        """Forget the passes at or before the serving counter: the database answers those (admitted, used, expired)."""
        while self.in_order and self.positions[self.in_order[0]] <= admitted_through:
            del self.positions[self.in_order.popleft()]

    def wanted(self, counters: QueueCounters) -> tuple[int, int] | None:
        """The range of positions (after, through] placed since this process last read and within
        PLACEMENTS_HELD of the serving counter; None when there is nothing new to read."""
        after = max(self.through, counters.admitted_through)
        through = min(counters.positioned_through, counters.admitted_through + PLACEMENTS_HELD)
        return (after, through) if through > after else None


_counters: dict[int, QueueCounters] = {}
_placements: dict[int, Placements] = {}
_read_monotonic: float | None = None


# One thread of a process reads the counters at a time; the others that find them old wait for that read and use
# it (a read rebuilds the placements, which two reads at once would both change). A read builds the new counters
# aside and puts them in place whole, so a thread answering meanwhile sees the old ones or the new, never a part.
_reading = threading.Lock()


def _stale() -> bool:
    return _read_monotonic is None or time.monotonic() - _read_monotonic >= settings.QUEUE_COUNTERS_MAX_AGE_SECONDS


def queue_counters(*, product_id: int) -> QueueCounters | None:
    """The product's queue counters, at most QUEUE_COUNTERS_MAX_AGE_SECONDS old; None when it has no queue."""
    if _stale():
        with _reading:
            if _stale():  # not read by another thread while this one waited
                _counters_read()
    return _counters.get(product_id)


def _counters_read() -> None:
    global _counters, _read_monotonic
    with connection.cursor() as cursor:
        sent = time.monotonic()
        cursor.execute(QUEUE_COUNTERS_SQL)
        rows = cursor.fetchall()
    now = time.monotonic()
    # The database's now() is an instant between sending and receiving: taken as the middle, within half the trip.
    middle, error = (sent + now) / 2, (now - sent) / 2
    counters = {}
    for pid, active, pace, paused, admitted, placed, created, starts, ends, available, reserved, db_now in rows:
        counters[pid] = QueueCounters(
            pid,
            active,
            pace,
            paused,
            admitted,
            placed,
            created,
            starts,
            ends,
            available,
            reserved,
            db_now,
            middle,
            error,
        )
    _counters = counters
    _placements_read()
    _read_monotonic = now


def _placements_read() -> None:
    """Bring every queue's placements up to its counters just read: at most one statement, none when no queue
    placed a pass this process has not read."""
    global _placements
    placements: dict[int, Placements] = {}
    ranges: dict[int, tuple[int, int]] = {}
    for pid, counters in _counters.items():
        held = _placements.get(pid)
        if held is None or held.created_us != counters.created_us:  # a queue new to this process, or re-created
            held = Placements(created_us=counters.created_us)
        held.drop_admitted(counters.admitted_through)
        wanted = held.wanted(counters)
        if wanted is not None:
            ranges[pid] = wanted
        placements[pid] = held
    _placements = placements
    if not ranges:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            PLACEMENTS_SQL,
            {
                "product_ids": list(ranges),
                "after": [after for after, _ in ranges.values()],
                "through": [through for _, through in ranges.values()],
            },
        )
        for pid, pass_id, position in cursor.fetchall():
            held = _placements[pid]
            held.positions[pass_id] = position
            held.in_order.append(pass_id)
    for pid, (_, through) in ranges.items():
        _placements[pid].through = through


def placed_position(*, product_id: int, pass_id: int) -> int | None:
    """The pass's position as this process last read it (:func:`queue_counters` reads them), None when it does not
    know it (not placed then, or beyond PLACEMENTS_HELD): the caller reads the pass from the database."""
    held = _placements.get(product_id)
    return None if held is None else held.positions.get(pass_id)


def queue_counters_forget(*, placements: bool = True) -> None:
    """Drop this process's counters (the next poll reads them again) and, unless ``placements`` is False (as when
    the counters grew old: the placements read stay), the placements it read."""
    global _counters, _placements, _read_monotonic
    _counters, _read_monotonic = {}, None
    if placements:
        _placements = {}
