"""The client-side proof of ``make failover``: what the clients were told against what the (new) leader holds.

Pure logic, no database and no Django: :func:`check` takes the request history recorded by the load driver and a
snapshot read from the leader after the failover, and returns every violation it finds (an empty list = proven).
``skincare/tests/test_failover_proof.py`` feeds it fabricated bad histories to show that each check can fail.

The checks:

- every checkout answered 201 exists, with exactly the lines it was answered with and one reservation per line;
- every ``Idempotency-Key`` maps to at most one order: all 201 answers for a key name the same order (a retry
  across the failover got the original answer), and every order of the run is the stored answer of exactly one key;
- every webhook answered 200 has its effect: its event is recorded, ``paid`` means the order is paid and its
  reservations consumed;
- every cancel answered 200 left the order cancelled; no order was both answered ``paid`` and cancelled, and no
  order is paid with a cancelled/expired reservation or cancelled with a consumed one;
- the sweepers finished the due reservations exactly once: no pending order is past its deadline, every expired
  reservation has exactly one ``expire`` ledger row and no other reservation has one;
- no answer was a 5xx other than 503, and no request failed at the HTTP level (the web tier never went away).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    """One HTTP request as the client saw it. ``status`` 0 = no HTTP answer (a time-out or an error)."""

    kind: str  # checkout | webhook | cancel
    status: int
    body: dict[str, Any]
    started: float  # monotonic seconds
    ended: float
    customer: str = ""
    key: str = ""  # Idempotency-Key (checkout)
    items: list[tuple[int, int]] = field(default_factory=list)  # (product_id, qty) asked for (checkout)
    order_id: int | None = None  # the order a webhook/cancel is about
    event_id: str = ""  # webhook
    replayed: bool = False  # Idempotent-Replayed: true
    error: str = ""
    outcome: str = ""  # answer | timeout | error (devtools.rehearsal_client)
    release: str = ""  # the X-Release header of the answer: which release served it


@dataclass
class Snapshot:
    """What the leader holds for the run's customers, read after the failover."""

    orders: dict[int, str]  # order id -> status
    lines: dict[int, list[tuple[int, int]]]  # order id -> [(product_id, qty)]
    reservations: dict[int, list[tuple[int, int, str]]]  # order id -> [(product_id, qty, status)]
    events: dict[str, tuple[int | None, str]]  # event id -> (order id, outcome)
    keys: dict[tuple[str, str], int | None]  # (customer, key) -> order id in the stored answer (None: no order)
    expire_ledger: dict[tuple[int, int], int]  # (order id, product id) -> number of `expire` ledger rows
    overdue_pending: int  # pending orders whose payment deadline has passed (must be 0 once the sweepers finished)


def check(calls: list[Call], snap: Snapshot) -> list[str]:
    problems: list[str] = []

    # The web tier answers every request, and never with a 5xx other than 503.
    for call in calls:
        if call.status == 0:
            problems.append(f"{call.kind} got no HTTP answer: {call.error}")
        elif call.status >= 500 and call.status != 503:
            problems.append(f"{call.kind} answered {call.status}: {call.body}")

    # Checkouts answered 201: the order, its lines, its reservations; one order per key.
    answered: dict[tuple[str, str], set[int]] = defaultdict(set)
    for call in calls:
        if call.kind != "checkout" or call.status != 201:
            continue
        order_id = int(call.body["order_id"])
        answered[(call.customer, call.key)].add(order_id)
        if order_id not in snap.orders:
            problems.append(f"checkout answered 201 with order {order_id} (key {call.key}): missing on the leader")
            continue
        if sorted(snap.lines.get(order_id, [])) != sorted(call.items):
            problems.append(
                f"order {order_id}: lines {sorted(snap.lines.get(order_id, []))} on the leader, "
                f"answered with {sorted(call.items)}"
            )
        reserved = sorted((p, q) for p, q, _status in snap.reservations.get(order_id, []))
        if reserved != sorted(call.items):
            problems.append(f"order {order_id}: reservations {reserved} on the leader, expected {sorted(call.items)}")
    for (customer, key), order_ids in answered.items():
        if len(order_ids) > 1:
            problems.append(f"key {key} of {customer} was answered with {len(order_ids)} orders: {sorted(order_ids)}")
        stored = snap.keys.get((customer, key))
        if (customer, key) not in snap.keys:
            problems.append(f"key {key} of {customer} answered 201 but is not stored on the leader")
        elif stored not in order_ids:
            problems.append(f"key {key} of {customer}: stored answer names order {stored}, client got {order_ids}")
    per_order = Counter(order_id for order_id in snap.keys.values() if order_id is not None)
    for order_id in snap.orders:
        if per_order[order_id] != 1:
            problems.append(f"order {order_id} is the stored answer of {per_order[order_id]} keys (expected exactly 1)")

    # Webhooks answered 200 and cancels answered 200.
    told_paid: set[int] = set()
    told_cancelled: set[int] = set()
    for call in calls:
        if call.kind == "webhook" and call.status == 200:
            outcome = str(call.body.get("status", ""))
            if call.event_id not in snap.events:
                problems.append(f"webhook {call.event_id} answered 200 ({outcome}) but is not recorded on the leader")
                continue
            if outcome == "paid":
                assert call.order_id is not None
                told_paid.add(call.order_id)
        elif call.kind == "cancel" and call.status == 200 and call.body.get("status") == "cancelled":
            assert call.order_id is not None
            told_cancelled.add(call.order_id)
    for order_id in sorted(told_paid):
        if snap.orders.get(order_id) != "paid":
            problems.append(f"webhook answered paid for order {order_id}, the leader says {snap.orders.get(order_id)}")
        elif any(status != "consumed" for _p, _q, status in snap.reservations.get(order_id, [])):
            problems.append(f"order {order_id} is paid but not every reservation is consumed")
    for order_id in sorted(told_cancelled):
        if snap.orders.get(order_id) != "cancelled":
            problems.append(f"cancel answered 200 for order {order_id}, the leader says {snap.orders.get(order_id)}")
    for order_id in sorted(told_paid & told_cancelled):
        problems.append(f"order {order_id} was answered both paid (webhook) and cancelled (cancel)")
    for order_id, status in snap.orders.items():
        statuses = {s for _p, _q, s in snap.reservations.get(order_id, [])}
        if status == "paid" and statuses & {"cancelled", "expired", "active"}:
            problems.append(f"order {order_id} is paid with reservations {sorted(statuses)}")
        if status == "cancelled" and statuses & {"consumed", "active"}:
            problems.append(f"order {order_id} is cancelled with reservations {sorted(statuses)}")

    # Sweepers: everything due was expired, exactly once.
    if snap.overdue_pending:
        problems.append(f"{snap.overdue_pending} pending orders are past their deadline: the sweepers did not finish")
    expired = {(o, p) for o, rows in snap.reservations.items() for p, _q, s in rows if s == "expired"}
    for pair in sorted(expired | set(snap.expire_ledger)):
        rows = snap.expire_ledger.get(pair, 0)
        wanted = 1 if pair in expired else 0
        if rows != wanted:
            problems.append(f"order {pair[0]} product {pair[1]}: {rows} expire ledger rows, expected {wanted}")
    return problems


def first_after(calls: list[Call], moment: float, *, kind: str = "checkout", status: int = 201) -> Call | None:
    """The first request started after ``moment`` that was answered ``status``, by its answer time."""
    later = [c for c in calls if c.kind == kind and c.status == status and c.started >= moment]
    return min(later, key=lambda c: c.ended, default=None)
