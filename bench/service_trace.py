"""What the service sends to claim a bucket, recorded from the service itself (``bench.buckets`` scripts it).

``reserve_claims()`` runs ``inventory.reserve.stock_reserve`` on a throwaway bucketed product inside a transaction
that is rolled back, with a request larger than any one bucket, so that every claim attempt misses and the full
pass runs. Every statement the service sends is recorded (``connection.execute_wrapper``); the claim attempts are
the statements between a ``SAVEPOINT`` and its ``ROLLBACK TO SAVEPOINT`` before the full pass, in the order and
with the parameters the service used. ``bench.buckets`` turns them into its pgbench script, so the benchmark runs
what the service runs now, not a copy of it: a change in how the service claims changes the script.

    python -m bench.service_trace     # with DATABASE_URL pointing at a migrated database: the claims and whether
                                      # they share one savepoint, as JSON
"""

import json
import sys
from typing import Any

SAVEPOINT, ROLLBACK_TO = "SAVEPOINT ", "ROLLBACK TO SAVEPOINT "
BUCKETS = 2  # the throwaway product: 2 buckets of 1 unit each, and a request of 2 that no single bucket covers


class _Rollback(Exception):
    pass


def record_reserve() -> list[tuple[str, dict[str, Any] | None]]:
    """Every statement (text and named parameters) of one ``stock_reserve`` of 2 units of a product with 2 buckets
    of one unit each, on the current database connection; nothing is left behind (the transaction rolls back)."""
    from decimal import Decimal

    from django.db import connection, transaction

    from inventory import catalogue, reserve, services

    sent: list[tuple[str, dict[str, Any] | None]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append((sql, dict(params) if isinstance(params, dict) else None))
        return execute(sql, params, many, context)

    try:
        with transaction.atomic():
            product = catalogue.product_create(
                sku="bench-trace-claims", name="bench trace", price=Decimal("1.00"), initial_stock=BUCKETS
            )
            services.stock_buckets_set(product_id=product.pk, buckets=BUCKETS)
            line = reserve.ReserveLine(product.pk, BUCKETS, bucket_count=BUCKETS, stock_rows=BUCKETS)
            # the order does not exist: the ledger's foreign key is checked at COMMIT, which never comes
            with connection.execute_wrapper(record):
                reserve.stock_reserve(order_id=0, lines=[line])
            raise _Rollback
    except _Rollback:
        pass
    return sent


def claims(sent: list[tuple[str, dict[str, Any] | None]]) -> list[tuple[str, dict[str, Any]]]:
    """The claim attempts of a recorded reservation: after a ``SAVEPOINT``, each statement followed by the
    ``ROLLBACK TO`` that savepoint (it missed), with a new ``SAVEPOINT`` before each next one or the same savepoint
    kept (a ROLLBACK TO keeps it: :func:`one_savepoint`), in order, up to the full pass. Raises ``ValueError`` if the
    service no longer claims that way (the benchmark must then be looked at again)."""
    return _shape(sent)[0]


def one_savepoint(sent: list[tuple[str, dict[str, Any] | None]]) -> bool:
    """Whether the recorded claim attempts share one savepoint (rolled back to before each next attempt)."""
    return _shape(sent)[1]


def _shape(sent: list[tuple[str, dict[str, Any] | None]]) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    found: list[tuple[str, dict[str, Any]]] = []
    savepoints = 0
    name = None
    i = 0
    while i + 1 < len(sent):
        if sent[i][0].startswith(SAVEPOINT):
            name = sent[i][0].removeprefix(SAVEPOINT).strip()
            savepoints += 1
            i += 1
        elif not found:
            break
        if name is None or i + 1 >= len(sent):
            break
        sql, params = sent[i]
        if sent[i + 1][0].strip() != ROLLBACK_TO + name or params is None:
            break
        found.append((sql, params))
        i += 2
    if not found or i >= len(sent):
        raise ValueError(
            "stock_reserve of a request larger than any bucket no longer sends claims after savepoints followed by "
            "a full pass; bench.buckets scripts that shape: look at it again. Statements sent:\n"
            + "\n".join(sql.strip().splitlines()[0] for sql, _ in sent)
        )
    return found, savepoints == 1 and len(found) > 1


def reserve_claims() -> list[tuple[str, dict[str, Any]]]:
    return claims(record_reserve())


def main() -> int:
    from devtools.processes import setup_django_quietly

    setup_django_quietly()
    sent = record_reserve()
    print(json.dumps({"claims": claims(sent), "one_savepoint": one_savepoint(sent)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
