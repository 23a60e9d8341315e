"""The proof of ``make restore-rehearsal``: a copy restored to the moment ``target`` holds exactly what was
acknowledged before it, and nothing that was asked for after it.

Pure logic, no database: the client's request history (:class:`devtools.failover_proof.Call`, monotonic times) is
split at ``target`` (the same clock) into what was answered before it, what was sent after it, and the requests in
flight at that moment (either outcome is right for those: the restore cuts between their start and their answer).
What was answered before ``target`` is checked by the proof of ``make failover`` (:func:`devtools.failover_proof.check`)
once the sweeper has run on the copy; what was sent after it must have left no trace on the copy (:func:`after_problems`,
read before anything else writes to the copy: order ids are reused once the copy takes orders again).
"""

from __future__ import annotations

from dataclasses import dataclass

from devtools.failover_proof import Call, Snapshot


@dataclass
class Split:
    before: list[Call]  # answered before target
    in_flight: list[Call]  # sent before target, answered after it
    after: list[Call]  # sent after target


def split_at(calls: list[Call], target: float) -> Split:
    before = [c for c in calls if c.ended < target]
    after = [c for c in calls if c.started > target]
    in_flight = [c for c in calls if c.started <= target <= c.ended]
    return Split(before, in_flight, after)


def after_problems(after: list[Call], snap: Snapshot) -> list[str]:
    """Every trace on the restored copy of a request sent after the target: an order a checkout created, the key it
    stored, a webhook event it recorded."""
    problems: list[str] = []
    for call in after:
        if call.kind == "checkout" and call.status == 201:
            order_id = int(call.body["order_id"])
            if order_id in snap.orders:
                problems.append(f"order {order_id} (key {call.key}) was created after the target and is on the copy")
            if (call.customer, call.key) in snap.keys:
                problems.append(f"key {call.key} of {call.customer} was stored after the target and is on the copy")
        elif call.kind == "webhook" and call.status == 200 and call.event_id in snap.events:
            problems.append(f"webhook {call.event_id} was applied after the target and is on the copy")
    return problems
