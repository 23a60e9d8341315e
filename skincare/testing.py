"""Helpers for tests that prove concurrency claims.

``run_concurrently`` starts real threads, each with its own database connection, lines them up on a
``threading.Barrier`` so that they hit the database in the same instant, collects every result or
exception, and closes each thread's connection. Use it only in ``transaction=True`` tests: the data the
threads race on must be committed.
"""

import threading
from dataclasses import dataclass

from django.db import connection, connections

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
