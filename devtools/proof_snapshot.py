"""What a database holds for one rehearsal's customers, as :class:`devtools.failover_proof.Snapshot`: read after
``make failover``'s failover, ``make deploy-rehearsal``'s rolling release and ``make restore-rehearsal``'s restore,
for the one client-side proof (:func:`devtools.failover_proof.check`)."""

from __future__ import annotations

from typing import Any

from devtools.failover_proof import Snapshot


def read_snapshot(conninfo: str, *, customer_prefix: str, event_prefix: str) -> Snapshot:
    """What ``conninfo``'s database holds for the customers named ``customer_prefix``-*, and the webhook events
    whose ids start with ``event_prefix``."""
    import psycopg

    with psycopg.connect(conninfo) as conn:

        def rows(query: str) -> list[tuple[Any, ...]]:
            return conn.execute(query, {"prefix": f"{customer_prefix}-%", "events": f"{event_prefix}%"}).fetchall()

        mine = "SELECT o.id FROM orders o JOIN auth_user u ON u.id = o.customer_id WHERE u.username LIKE %(prefix)s"
        orders = {int(i): str(s) for i, s in rows(f"SELECT id, status FROM orders WHERE id IN ({mine})")}
        lines: dict[int, list[tuple[int, int]]] = {}
        for o, p, q in rows(f"SELECT order_id, product_id, qty FROM order_lines WHERE order_id IN ({mine})"):
            lines.setdefault(int(o), []).append((int(p), int(q)))
        reservations: dict[int, list[tuple[int, int, str]]] = {}
        for o, p, q, s in rows(
            f"SELECT order_id, product_id, qty, status FROM inventory_reservations WHERE order_id IN ({mine})"
        ):
            reservations.setdefault(int(o), []).append((int(p), int(q), str(s)))
        events = {
            str(e): (None if o is None else int(o), str(out))
            for e, o, out in rows(
                f"SELECT event_id, order_id, outcome FROM processed_events WHERE order_id IN ({mine}) "
                "OR event_id LIKE %(events)s"
            )
        }
        keys = {
            (str(u), str(k)): (None if o is None else int(o))
            for u, k, o in rows(
                "SELECT u.username, k.key, (k.response_body->>'order_id')::bigint FROM idempotency_keys k "
                "JOIN auth_user u ON u.id = k.customer_id WHERE u.username LIKE %(prefix)s"
            )
        }
        ledger = {
            (int(o), int(p)): int(n)
            for o, p, n in rows(
                f"SELECT order_id, product_id, count(*) FROM stock_movements WHERE reason = 'expire' "
                f"AND order_id IN ({mine}) GROUP BY 1, 2"
            )
        }
        [(overdue,)] = rows(
            "SELECT count(*) FROM orders WHERE status = 'pending_payment' AND payment_expires_at < now()"
        )
    return Snapshot(orders, lines, reservations, events, keys, ledger, int(overdue))
