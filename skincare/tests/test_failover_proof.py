"""The proof checker of ``make failover`` (devtools.failover_proof) on fabricated histories: a consistent one passes,
and each kind of loss or double effect it is there to catch is reported. No database: the checker is pure."""

import copy

import pytest

from devtools.failover_proof import Call, Snapshot, check, first_after


def checkout(order_id: int, key: str, items: list[tuple[int, int]], *, t: float = 1.0, replayed: bool = False) -> Call:
    return Call(
        "checkout", 201, {"order_id": order_id}, t, t + 0.1, customer="c", key=key, items=items, replayed=replayed
    )


def good() -> tuple[list[Call], Snapshot]:
    calls = [
        checkout(1, "k1", [(2001, 1)]),
        Call("checkout", 503, {"code": "database_unavailable"}, 2.0, 2.1, customer="c", key="k2", items=[(2002, 2)]),
        checkout(2, "k2", [(2002, 2)], t=3.0, replayed=True),  # the retry across the failover replays
        Call("webhook", 200, {"status": "paid"}, 4.0, 4.1, order_id=1, event_id="evt-k1"),
        Call("cancel", 200, {"status": "cancelled"}, 5.0, 5.1, order_id=2),
        checkout(3, "k3", [(2003, 1), (2004, 2)], t=6.0),  # abandoned, then swept
        Call("checkout", 409, {"code": "stock_conflict"}, 7.0, 7.1, customer="c", key="k4", items=[(2005, 1)]),
    ]
    snap = Snapshot(
        orders={1: "paid", 2: "cancelled", 3: "cancelled"},
        lines={1: [(2001, 1)], 2: [(2002, 2)], 3: [(2003, 1), (2004, 2)]},
        reservations={
            1: [(2001, 1, "consumed")],
            2: [(2002, 2, "cancelled")],
            3: [(2003, 1, "expired"), (2004, 2, "expired")],
        },
        events={"evt-k1": (1, "paid")},
        keys={("c", "k1"): 1, ("c", "k2"): 2, ("c", "k3"): 3, ("c", "k4"): None},
        expire_ledger={(3, 2003): 1, (3, 2004): 1},
        overdue_pending=0,
    )
    return calls, snap


def test_a_consistent_history_passes() -> None:
    calls, snap = good()
    assert check(calls, snap) == []


def _lost_order(calls: list[Call], snap: Snapshot) -> None:
    del snap.orders[3], snap.lines[3], snap.reservations[3], snap.keys[("c", "k3")]
    snap.expire_ledger.clear()


def _second_order_for_a_key(calls: list[Call], snap: Snapshot) -> None:
    calls.append(checkout(9, "k1", [(2001, 1)], t=8.0))
    snap.orders[9], snap.lines[9], snap.reservations[9] = "pending_payment", [(2001, 1)], [(2001, 1, "active")]


def _order_without_key(calls: list[Call], snap: Snapshot) -> None:
    snap.orders[10], snap.lines[10], snap.reservations[10] = "pending_payment", [(2001, 1)], [(2001, 1, "active")]


def _missing_line(calls: list[Call], snap: Snapshot) -> None:
    snap.lines[3] = [(2003, 1)]


def _missing_reservation(calls: list[Call], snap: Snapshot) -> None:
    snap.reservations[3] = [(2003, 1, "expired")]
    snap.expire_ledger = {(3, 2003): 1}


def _lost_payment(calls: list[Call], snap: Snapshot) -> None:
    del snap.events["evt-k1"]


def _paid_not_applied(calls: list[Call], snap: Snapshot) -> None:
    snap.orders[1] = "pending_payment"
    snap.reservations[1] = [(2001, 1, "active")]


def _cancel_lost(calls: list[Call], snap: Snapshot) -> None:
    snap.orders[2] = "pending_payment"
    snap.reservations[2] = [(2002, 2, "active")]


def _paid_and_cancelled(calls: list[Call], snap: Snapshot) -> None:
    calls.append(Call("cancel", 200, {"status": "cancelled"}, 9.0, 9.1, order_id=1))


def _swept_twice(calls: list[Call], snap: Snapshot) -> None:
    snap.expire_ledger[(3, 2003)] = 2


def _not_swept(calls: list[Call], snap: Snapshot) -> None:
    snap.overdue_pending = 1


def _a_500(calls: list[Call], snap: Snapshot) -> None:
    calls.append(Call("checkout", 500, {"code": "internal_error"}, 9.0, 9.1, customer="c", key="k9"))


def _no_answer(calls: list[Call], snap: Snapshot) -> None:
    calls.append(Call("webhook", 0, {}, 9.0, 9.1, order_id=1, event_id="evt-k1", error="ConnectionResetError"))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (_lost_order, "missing on the leader"),
        (_second_order_for_a_key, "answered with 2 orders"),
        (_order_without_key, "stored answer of 0 keys"),
        (_missing_line, "lines"),
        (_missing_reservation, "reservations"),
        (_lost_payment, "not recorded on the leader"),
        (_paid_not_applied, "webhook answered paid for order 1"),
        (_cancel_lost, "cancel answered 200 for order 2"),
        (_paid_and_cancelled, "both paid"),
        (_swept_twice, "2 expire ledger rows"),
        (_not_swept, "past their deadline"),
        (_a_500, "answered 500"),
        (_no_answer, "no HTTP answer"),
    ],
)
def test_each_violation_is_reported(damage, expected) -> None:  # type: ignore[no-untyped-def]
    calls, snap = good()
    calls, snap = copy.deepcopy(calls), copy.deepcopy(snap)
    damage(calls, snap)
    problems = check(calls, snap)
    assert any(expected in p for p in problems), problems


def test_first_201_after_the_kill_is_by_answer_time() -> None:
    calls, _snap = good()
    assert first_after(calls, 2.5) is calls[2]
    assert first_after(calls, 100.0) is None
