"""Helpers for tests that prove concurrency claims.

``run_concurrently`` starts real threads, each with its own database connection, lines them up on a
``threading.Barrier`` so that they hit the database in the same instant, collects every result or
exception, and closes each thread's connection. Use it only in ``transaction=True`` tests: the data the
threads race on must be committed.
"""

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from orders.audit import audit_inventory


@dataclass
class Outcome:
    index: int
    value: object = None
    error: BaseException | None = None


def run_concurrently(count, func, *, timeout=120):
    """Call ``func(i)`` for i in range(count) on ``count`` threads released together by a barrier.

    Returns a list of :class:`Outcome` in index order. Raises if a thread does not finish in ``timeout``
    seconds (a hang is a failure, never a skip).
    """
    barrier = threading.Barrier(count)
    outcomes = [Outcome(i) for i in range(count)]

    def worker(i):
        try:
            barrier.wait(timeout=timeout)
            outcomes[i].value = func(i)
        except BaseException as exc:
            outcomes[i].error = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,), name=f"race-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        raise AssertionError(f"threads still running after {timeout}s: {alive[:5]}")
    return outcomes


def assert_invariants():
    """The one invariant check used by every test: per product ``reserved_stock`` equals the active
    reservations, nothing is negative, counters equal the stock ledger, consumed units match, and every
    order's status agrees with its reservations (see ``orders.audit``)."""
    violations = audit_inventory()
    assert not violations, "inventory invariants violated:\n" + "\n".join(map(str, violations))


def make_overdue(order):
    """Test setup only: close an order's payment window by the database clock (order and reservations)."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders SET payment_expires_at = now() - interval '1 second' WHERE id = %s", [order.pk])
        cursor.execute(
            "UPDATE inventory_reservations SET expires_at = now() - interval '1 second' WHERE order_id = %s",
            [order.pk],
        )


class ThreadRun:
    """A function running on its own thread with its own database connection (closed when it ends)."""

    def __init__(self, func: Callable[[], object], *, name: str = "fault-worker") -> None:
        self.outcome = Outcome(0)

        def target() -> None:
            try:
                self.outcome.value = func()
            except BaseException as exc:
                self.outcome.error = exc
            finally:
                connections.close_all()

        self.thread = threading.Thread(target=target, name=name, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 60) -> Outcome:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"{self.thread.name} still running after {timeout}s")
        return self.outcome


def wait_until(predicate: Callable[[], object], *, timeout: float = 30, what: str = "condition") -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds. For conditions no
    event can signal (another process's state, a server coming up)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def backends(where: str, params: Sequence[object] = ()) -> list[int]:
    """Pids of the other client backends of this database matching ``where`` (SQL over pg_stat_activity), read
    on a connection of its own (a snapshot inside a caller's transaction would never change)."""
    conn = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                f"AND backend_type = 'client backend' AND ({where}) ORDER BY pid",
                list(params),
            )
            return [row[0] for row in cursor.fetchall()]
    finally:
        conn.close()


def lock_waiters() -> list[int]:
    """Backends currently waiting for a heavyweight lock (a row lock, for the tests here)."""
    return backends("wait_event_type = 'Lock'")


def wait_for_lock_waiters(count: int, *, timeout: float = 30) -> list[int]:
    """Wait until at least ``count`` other backends wait for a lock; returns their pids."""
    found: list[int] = []

    def enough() -> bool:
        found[:] = lock_waiters()
        return len(found) >= count

    wait_until(enough, timeout=timeout, what=f"{count} backends waiting for a lock")
    return found


def act_while_held(
    *, change: Callable[[], object], act: Callable[[], object], before_act: Callable[[], object] | None = None
) -> "Outcome":
    """A deterministic lock race: ``change`` runs in a transaction on a thread (and connection) of its own and keeps
    what it locked, uncommitted; then ``before_act`` (here, e.g. to check that the change is not visible yet), then
    ``act`` starts on another thread; once a backend waits for a lock, ``change`` commits. Returns ``act``'s
    outcome; ``change`` must not fail. Synchronised by events and the database's lock waits, never by sleeping."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            change()
            held.set()
            assert release.wait(timeout=60)

    holder = ThreadRun(hold, name="holder")
    try:
        assert held.wait(timeout=60)
        if before_act is not None:
            before_act()
        actor = ThreadRun(act, name="actor")
        wait_for_lock_waiters(1)
    finally:
        release.set()
        changed = holder.join()
    assert changed.error is None, changed.error
    return actor.join()
