"""Count the database round trips of one HTTP checkout, and those made while the hot stock row is locked.

    DATABASE_URL=... python -m bench.roundtrips [PRODUCT_ID ...]

Runs real requests through Django's test client (full middleware, DRF, Bearer auth) against the database
DATABASE_URL names (use the benchmark database: it creates one order). Every statement is recorded with an
``execute_wrapper``; COMMIT/ROLLBACK come from psycopg, so they are counted from the connection's commit hooks.
"""

import sys
import time
from typing import Any

from devtools.processes import setup_django_quietly


def main(argv: list[str]) -> None:
    setup_django_quietly()
    import json

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from skincare import services as skincare_services

    products = [int(a) for a in argv] or [101]
    # A fresh token for the demo customer (tokens are stored as digests, so an existing one cannot be read back).
    token = skincare_services.api_token_issue(user=get_user_model().objects.get(username="demo-customer"))
    statements = []

    def recorder(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append((sql, (time.perf_counter() - started) * 1000))

    client = Client()
    body = json.dumps({"items": [{"product_id": pid, "qty": 1} for pid in products]})
    for label in ("warm-up", "measured"):
        statements.clear()
        with connection.execute_wrapper(recorder):
            started = time.perf_counter()
            resp = client.post(
                "/v1/checkout", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
            )
            elapsed = (time.perf_counter() - started) * 1000
        if label == "warm-up":
            continue
        print(f"POST /v1/checkout {products} -> {resp.status_code} in {elapsed:.1f} ms (in-process, no HTTP)")
        locked_from = None
        for i, (sql, ms) in enumerate(statements):
            first = " ".join(sql.split())[:150]
            if locked_from is None and (
                first.startswith(("UPDATE stock_buckets", "WITH free AS", "WITH pick AS"))
                or ("FOR NO KEY UPDATE" in first and "stock_buckets" in first)
            ):
                locked_from = i
            mark = "L" if locked_from is not None and i >= locked_from else " "
            print(f"  {i + 1:2d} {mark} {ms:6.2f} ms  {first}")
        print(f"  {len(statements) + 1:2d} L  (COMMIT or ROLLBACK, sent by psycopg)")
        total = len(statements) + 1
        held = (len(statements) - locked_from + 1) if locked_from is not None else 0
        print(f"round trips: {total} for the request; {held} while the stock row lock is held (L, incl. COMMIT)")


if __name__ == "__main__":
    main(sys.argv[1:])
