"""Reads of the waiting room: a pass as its customer sees it, and each queue's state for the admin and metrics.

A poll is one statement by primary key (or by the (product, customer) unique index), joined with its queue, its
product and the product's stock rows: no row lock, no count over the queue. ``ahead`` is the pass's position minus
the queue's serving counter (``admitted_through``), so its cost does not grow with the queue.
"""

import math
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from inventory.selectors import SALE_ENDED, SALE_STATE_SQL, SECONDS_TO_START_SQL, STOCK_SUM_SQL
from skincare.timestamps import utc_z
from waitingroom.counters import QueueCounters, placed_position, queue_counters
from waitingroom.exceptions import QueuePassOutdated
from waitingroom.models import PassState
from waitingroom.passtoken import SignedPass

WAITING, ADMITTED, USED, EXPIRED, SOLD_OUT = (
    PassState.WAITING.value,
    PassState.ADMITTED.value,
    PassState.USED.value,
    PassState.EXPIRED.value,
    PassState.SOLD_OUT.value,
)
# What ``admission_required`` says for a product the customer holds no pass for.
NO_PASS = "none"  # noqa: S105 - a state word, not a password

# A pass's own state (``qp``: a queue_passes row), by the database clock: the one definition every read uses.
# An admitted pass stays admitted until admitted_until even if the stock ran out meanwhile (its checkout then says
# stock_conflict).
PASS_OWN_STATE_SQL = f"""CASE WHEN qp.used_at IS NOT NULL THEN '{USED}'
         WHEN qp.admitted_at IS NOT NULL AND qp.admitted_until > now() THEN '{ADMITTED}'
         WHEN qp.admitted_at IS NOT NULL THEN '{EXPIRED}'
         ELSE '{WAITING}' END"""

# The state the pass API shows: a waiting pass is sold out once no unit is available and none is reserved (no unit
# can come back) or the sale ended. ``own.state``: PASS_OWN_STATE_SQL, ``s``: the product's stock.
PASS_STATE_SQL = f"""CASE WHEN own.state = '{WAITING}'
              AND (({SALE_STATE_SQL}) = '{SALE_ENDED}'
                   OR (COALESCE(stock.available_stock, 0) <= 0 AND COALESCE(stock.reserved_stock, 0) <= 0)) THEN '{SOLD_OUT}'
         ELSE own.state END"""

_PASS_SQL = f"""
SELECT qp.id, qp.product_id, qp.position, qp.draw, qp.admitted_until, {PASS_STATE_SQL} AS state,
       q.admit_per_second, q.paused, q.admitted_through, {SECONDS_TO_START_SQL} AS seconds_to_start,
       COALESCE(stock.available_stock, 0) AS available, COALESCE(stock.reserved_stock, 0) AS reserved,
       (extract(epoch FROM q.created_at) * 1000000)::bigint AS queue_created_us,
       (extract(epoch FROM qp.joined_at) * 1000000)::bigint AS joined_us
FROM queue_passes qp
JOIN product_queues q ON q.product_id = qp.product_id
JOIN products p ON p.id = qp.product_id
{STOCK_SUM_SQL}
CROSS JOIN LATERAL (SELECT {PASS_OWN_STATE_SQL} AS state) own
WHERE qp.customer_id = %(customer_id)s AND {{where}}
"""
PASS_BY_ID_SQL = _PASS_SQL.format(where="qp.id = %(pass_id)s")
PASS_BY_PRODUCT_SQL = _PASS_SQL.format(where="qp.product_id = %(product_id)s")


@dataclass(frozen=True)
class PassView:
    pass_id: int
    product_id: int
    state: str
    position: int | None
    ahead: int | None
    eta_seconds: int | None
    poll_after: int | None
    admitted_until: datetime | None
    paused: bool
    admit_per_second: int
    units_may_return: bool  # waiting while no unit is available but some are reserved by unpaid orders
    queue_created_us: int  # which queue the pass is in (signed with it, never shown: waitingroom.passtoken)
    joined_us: int | None  # its arrival on the database's clock (signed with it, never shown)

    def to_json(self) -> dict[str, Any]:
        return {
            "pass_id": self.pass_id,
            "product_id": self.product_id,
            "state": self.state,
            "position": self.position,
            "ahead": self.ahead,
            "eta_seconds": self.eta_seconds,
            "poll_after": self.poll_after,
            "admitted_until": None if self.admitted_until is None else utc_z(self.admitted_until),
            "paused": self.paused,
            "admit_per_second": self.admit_per_second,
            "units_may_return": self.units_may_return,
        }


def poll_after_seconds(*, ahead: int, pace: int, paused: bool) -> int:
    """How long a waiting, placed pass should wait before its next poll: half its ETA (``ahead / pace``), at least
    QUEUE_POLL_MIN_SECONDS and at most QUEUE_POLL_MAX_SECONDS (the max while paused). The max is what keeps a client
    that obeys it from missing its admission whatever ops do to the pace: it is at most half the admission's TTL
    (config/settings.py), so a pass admitted right after a poll sees it at the next one with half its TTL left. N
    waiting passes poll at most ``2·pace·(1 + ln(P_max / P_min)) + N / P_max`` times per second
    (docs/queue.md#polling)."""
    if paused:
        return settings.QUEUE_POLL_MAX_SECONDS
    return min(settings.QUEUE_POLL_MAX_SECONDS, max(settings.QUEUE_POLL_MIN_SECONDS, math.ceil(ahead / (2 * pace))))


def poll_before_opening_seconds(*, seconds_to_start: float) -> int:
    """A waiting pass before the opening: come back at the opening plus a random slot in QUEUE_POLL_MAX_SECONDS
    (so the first polls after it are spread instead of all at once), at most QUEUE_POLL_MAX_SECONDS from now. The
    slot is drawn afresh at each answer, never from the pass's own draw: nothing in the answer ranks the pass."""
    spread = random.random() * settings.QUEUE_POLL_MAX_SECONDS  # noqa: S311 - spreading load, not a secret
    return min(
        settings.QUEUE_POLL_MAX_SECONDS, max(settings.QUEUE_POLL_MIN_SECONDS, math.ceil(seconds_to_start + spread))
    )


def _pass_view_from_row(row: tuple[Any, ...]) -> PassView:
    (
        pass_id,
        product_id,
        position,
        _draw,
        admitted_until,
        state,
        pace,
        paused,
        through,
        to_start,
        available,
        _r,
        queue,
        joined_us,
    ) = row
    ahead = eta = poll = None
    if state == WAITING:
        if to_start is not None:
            # Before the opening the order is not drawn yet (and the answer says nothing of the pass's draw).
            poll = poll_before_opening_seconds(seconds_to_start=float(to_start))
            eta = math.ceil(float(to_start))
        elif position is None:
            poll = settings.QUEUE_POLL_MIN_SECONDS  # placed at the next advance
        else:
            ahead = max(0, position - through - 1)
            eta = None if paused else math.ceil(ahead / pace)
            poll = poll_after_seconds(ahead=ahead, pace=pace, paused=paused)
    return PassView(
        pass_id=pass_id,
        product_id=product_id,
        state=state,
        position=position,
        ahead=ahead,
        eta_seconds=eta,
        poll_after=poll,
        admitted_until=admitted_until if state == ADMITTED else None,
        paused=paused,
        admit_per_second=pace,
        units_may_return=state == WAITING and available <= 0,
        queue_created_us=queue,
        joined_us=joined_us,
    )


def pass_get(*, customer_id: int, pass_id: int | None = None, product_id: int | None = None) -> PassView | None:
    """The customer's pass by its id, or the customer's pass for ``product_id``; None when there is none (another
    customer's pass is None too)."""
    sql = PASS_BY_ID_SQL if pass_id is not None else PASS_BY_PRODUCT_SQL
    with connection.cursor() as cursor:
        cursor.execute(sql, {"customer_id": customer_id, "pass_id": pass_id, "product_id": product_id})
        row = cursor.fetchone()
    return None if row is None else _pass_view_from_row(row)


def pass_poll(*, signed: SignedPass) -> PassView | None:
    """A poll with a verified signed pass (``waitingroom.passtoken``): a waiting, placed pass behind its queue's
    serving counter is answered from the pass and this process's queue counters (``waitingroom.counters``, at most
    QUEUE_COUNTERS_MAX_AGE_SECONDS old): no statement while they are fresh. So is a pass before the opening. A pass
    signed before the opening and placed since takes its position from the placements this process read with the
    counters (the answer carries a new signed pass with it). The database answers (:func:`pass_get`) what neither
    can: a pass placed since this process's last read (or beyond the placements it holds), one at or before the
    serving counter (admitted, used or expired: exact, with its ``admitted_until``), or of a queue this process does
    not know, or a pass signed without its queue. None: no such pass.

    A pass of an earlier queue (the queue was reset or re-created since it was signed) is refused
    (QueuePassOutdated), as soon as this process's counters are of the new queue."""
    counters = queue_counters(product_id=signed.product_id)
    position = signed.position
    if counters is not None and signed.queue_created_us is not None and signed.queue_created_us < counters.created_us:
        raise QueuePassOutdated(pass_id=signed.pass_id)
    if counters is not None and signed.queue_created_us == counters.created_us:
        to_start = counters.seconds_to_start()
        if position is None and to_start is not None:
            waiting = WAITING if not counters.sold_out() else SOLD_OUT
            return _pass_view_from_counters(signed, None, counters, waiting, to_start)
        if position is None:
            position = placed_position(product_id=signed.product_id, pass_id=signed.pass_id)
        if position is not None and position > counters.admitted_through:
            if counters.sold_out():
                return _pass_view_from_counters(signed, position, counters, SOLD_OUT, None)
            return _waiting_from_counters(signed, position, counters)
    return pass_get(customer_id=signed.customer_id, pass_id=signed.pass_id)


def _pass_view_from_counters(
    signed: SignedPass, position: int | None, counters: QueueCounters, state: str, to_start: float | None
) -> PassView:
    """A pass before the opening (``to_start``) or sold out, from its signed copy and its queue's counters."""
    waiting = state == WAITING
    return PassView(
        pass_id=signed.pass_id,
        product_id=signed.product_id,
        state=state,
        position=position,
        ahead=None,
        eta_seconds=math.ceil(to_start) if waiting and to_start is not None else None,
        poll_after=poll_before_opening_seconds(seconds_to_start=to_start) if waiting and to_start is not None else None,
        admitted_until=None,
        paused=counters.paused,
        admit_per_second=counters.admit_per_second,
        units_may_return=False,
        queue_created_us=counters.created_us,
        joined_us=signed.joined_us,
    )


def pass_view_joined(*, signed: SignedPass, counters: QueueCounters) -> PassView:
    """A pass just answered by the join (``waitingroom.joins``), not placed yet: waiting for the opening, or for its
    place at the next advance."""
    to_start = counters.seconds_to_start()
    state = SOLD_OUT if counters.sold_out() else WAITING
    if to_start is not None or state == SOLD_OUT:
        return _pass_view_from_counters(signed, None, counters, state, to_start)
    return _waiting_from_counters(signed, None, counters)


def _waiting_from_counters(signed: SignedPass, position: int | None, counters: QueueCounters) -> PassView:
    """A waiting pass after the opening, from its signed copy and its queue's counters: placed behind the serving
    counter (``ahead``, its ETA and poll_after from its place), or not placed yet (placed at the next advance)."""
    pace, paused = counters.admit_per_second, counters.paused
    ahead = None if position is None else position - counters.admitted_through - 1
    return PassView(
        pass_id=signed.pass_id,
        product_id=signed.product_id,
        state=WAITING,
        position=position,
        ahead=ahead,
        eta_seconds=None if ahead is None or paused else math.ceil(ahead / pace),
        poll_after=(
            settings.QUEUE_POLL_MIN_SECONDS
            if ahead is None
            else poll_after_seconds(ahead=ahead, pace=pace, paused=paused)
        ),
        admitted_until=None,
        paused=paused,
        admit_per_second=pace,
        units_may_return=counters.available <= 0,
        queue_created_us=counters.created_us,
        joined_us=signed.joined_us,
    )


@dataclass(frozen=True)
class QueueState:
    product_id: int
    admit_per_second: int
    paused: bool
    waiting: int
    admitted: int  # outstanding: admitted, not used, not expired
    used: int
    expired: int
    admitted_through: int


# Each queue's passes by their own state (PASS_OWN_STATE_SQL), from its counters and two small index scans, so the
# cost does not grow with the queue: positions are admitted in order, so the passes admitted so far are
# ``admitted_through``, and the placed ones ``positioned_through``; the unplaced ones (a moment after a join) are read
# from the ``queue_pass_unplaced`` index, the admitted-unused ones (outstanding or lapsed, at most the admissions
# granted) from ``queue_pass_outstanding``. Used = admitted - outstanding - lapsed.
QUEUE_STATES_SQL = """
SELECT q.product_id, q.admit_per_second, q.paused,
       q.positioned_through - q.admitted_through + unplaced.n AS waiting,
       unused.admitted,
       q.admitted_through - unused.admitted - unused.expired AS used,
       unused.expired,
       q.admitted_through
FROM product_queues q
CROSS JOIN LATERAL (SELECT count(*) AS n FROM queue_passes qp
                     WHERE qp.product_id = q.product_id AND qp.position IS NULL) unplaced
CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE qp.admitted_until > now()) AS admitted,
                           count(*) FILTER (WHERE qp.admitted_until <= now()) AS expired
                      FROM queue_passes qp
                     WHERE qp.product_id = q.product_id AND qp.admitted_at IS NOT NULL AND qp.used_at IS NULL) unused
WHERE %(every_queue)s OR q.product_id = ANY(%(product_ids)s::bigint[])
ORDER BY q.product_id
"""


def queue_states(*, product_ids: list[int] | None = None) -> list[QueueState]:
    """The counts of the queues of ``product_ids`` (None: every queue) for the admin, the metrics and the sale
    board: one statement whose cost does not grow with the queue's length (:data:`QUEUE_STATES_SQL`)."""
    with connection.cursor() as cursor:
        cursor.execute(QUEUE_STATES_SQL, {"every_queue": product_ids is None, "product_ids": product_ids or []})
        return [QueueState(*row) for row in cursor.fetchall()]
