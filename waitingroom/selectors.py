"""Reads of the waiting room: a pass as its customer sees it, and each queue's state for the admin and metrics.

A poll is one statement by primary key (or by the (product, customer) unique index), joined with its queue, its
product and the product's stock rows: no row lock, no count over the queue. ``ahead`` is the pass's position minus
the queue's serving counter (``admitted_through``), so its cost does not grow with the queue.
"""

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection

from inventory.selectors import SALE_ENDED, SALE_STATE_SQL, SECONDS_TO_START_SQL, STOCK_SUM_SQL
from skincare.timestamps import utc_z
from waitingroom.models import PassState

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
       COALESCE(stock.available_stock, 0) AS available, COALESCE(stock.reserved_stock, 0) AS reserved
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
    QUEUE_POLL_MIN_SECONDS (QUEUE_POLL_MAX_SECONDS while paused), so a client re-polls a few times on its way to the
    front and the total poll rate of N waiting passes is at most
    ``2·pace·(1 + ln(1 + N / (2·pace·QUEUE_POLL_MIN_SECONDS)))`` (docs/queue.md#polling). Half the ETA keeps a client
    in time when ops double the pace."""
    floor = settings.QUEUE_POLL_MAX_SECONDS if paused else settings.QUEUE_POLL_MIN_SECONDS
    return max(floor, math.ceil(ahead / (2 * pace)))


def _pass_view_from_row(row: tuple[Any, ...]) -> PassView:
    (pass_id, product_id, position, draw, admitted_until, state, pace, paused, through, to_start, available, _r) = row
    ahead = eta = poll = None
    if state == WAITING:
        if to_start is not None:
            # Before the opening the order is not drawn yet; the draw spreads the first poll after the opening over
            # QUEUE_POLL_MAX_SECONDS in the order it will give (the front comes first), instead of everyone at once.
            poll = max(
                settings.QUEUE_POLL_MIN_SECONDS, math.ceil(float(to_start) + draw * settings.QUEUE_POLL_MAX_SECONDS)
            )
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
    )


def pass_get(*, customer_id: int, pass_id: int | None = None, product_id: int | None = None) -> PassView | None:
    """The customer's pass by its id, or the customer's pass for ``product_id``; None when there is none (another
    customer's pass is None too)."""
    sql = PASS_BY_ID_SQL if pass_id is not None else PASS_BY_PRODUCT_SQL
    with connection.cursor() as cursor:
        cursor.execute(sql, {"customer_id": customer_id, "pass_id": pass_id, "product_id": product_id})
        row = cursor.fetchone()
    return None if row is None else _pass_view_from_row(row)


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


# Each queue's passes counted by their own state (PASS_OWN_STATE_SQL), one index scan of the queue's passes each.
QUEUE_STATES_SQL = f"""
SELECT q.product_id, q.admit_per_second, q.paused,
       count(*) FILTER (WHERE own.state = '{WAITING}') AS waiting,
       count(*) FILTER (WHERE own.state = '{ADMITTED}') AS admitted,
       count(*) FILTER (WHERE own.state = '{USED}') AS used,
       count(*) FILTER (WHERE own.state = '{EXPIRED}') AS expired,
       q.admitted_through
FROM product_queues q
LEFT JOIN LATERAL (SELECT {PASS_OWN_STATE_SQL} AS state FROM queue_passes qp WHERE qp.product_id = q.product_id) own
       ON true
WHERE %(every_queue)s OR q.product_id = ANY(%(product_ids)s::bigint[])
GROUP BY q.product_id ORDER BY q.product_id
"""


def queue_states(*, product_ids: list[int] | None = None) -> list[QueueState]:
    """The counts of the queues of ``product_ids`` (None: every queue) for the admin, the metrics and the sale
    board: one statement, a scan of those queues' passes, for ops, never on a buyer's path."""
    with connection.cursor() as cursor:
        cursor.execute(QUEUE_STATES_SQL, {"every_queue": product_ids is None, "product_ids": product_ids or []})
        return [QueueState(*row) for row in cursor.fetchall()]
