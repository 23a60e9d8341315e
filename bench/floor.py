"""The framework's floor, built by the benchmark only: the seed's checkout transaction served by a minimal Django
view on the same gunicorn as the service, so that "everything the checkout adds on top of Django + gunicorn + one
transaction" is one ratio in the results table (checkout ÷ floor, hot and spread).

- **The SQL** is the seed's transaction that pgbench runs (bench.scripts: ``SEED_HEAD``, ``SEED_GUARDED_UPDATE``,
  ``SEED_REST``), statement by statement (``statements``): pgbench's ``:name`` variables become bound parameters
  ``%(name)s``; BEGIN and COMMIT are Django's atomic block. One cursor runs them all, on the same tables.
- **Prepared like the service**: the floor's settings (bench.floor_settings) take ``DATABASES`` from the project's
  settings unchanged, so the connection has the service's options (server-side binding and psycopg's
  ``prepare_threshold`` on a direct connection, the lock and statement timeouts, ``CONN_MAX_AGE``).
- **Nothing else**: no installed app, no middleware, no authentication (every order is placed by the customer
  pgbench's script uses, ``BENCH_FLOOR_CUSTOMER``), no logging but gunicorn's. The view answers 201 with a small
  JSON body; 409 when the stock row's guarded UPDATE finds no unit; 400 on a body that names no product.
- Served by gunicorn with the service's configuration file and ``bench.floor_wsgi:application`` (bench.cells starts
  it through ``devtools.processes.Gunicorn(app=...)`` with the service's worker count), driven by the same wrk
  script (bench/checkout.lua) at ``POST /v1/checkout``. ``/readyz`` answers 200 for the harness's readiness wait.

Never in the application's URLconf, never in the image (``bench/`` is in .dockerignore).
"""

import json
import re

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path

from bench.scripts import SEED_GUARDED_UPDATE, SEED_HEAD, SEED_REST

WSGI_APP = "bench.floor_wsgi:application"
SETTINGS_MODULE = "bench.floor_settings"


def statements() -> list[str]:
    """The seed's transaction as bench.scripts gives it to pgbench, in its order (price read, order, guarded UPDATE,
    order line, reservation, payment attempt, ledger row), each with ``:name`` as a bound parameter ``%(name)s``."""
    lines = [line for line in SEED_HEAD.splitlines() if line.strip() and line.strip() != "BEGIN;"]
    out = []
    for stmt in [*lines, SEED_GUARDED_UPDATE, *SEED_REST]:
        text = stmt.strip().removesuffix("\\gset").strip().removesuffix(";")
        if "::" in text or "\\" in text:
            raise ValueError(f"the seed's statement has a cast or a pgbench command the floor cannot bind: {text}")
        out.append(re.sub(r":(\w+)", r"%(\1)s", text))
    return out


PRICE_SQL, ORDER_SQL, RESERVE_SQL, *ROWS_SQL = statements()


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": message, "code": code}, status=status)


def checkout(request: HttpRequest) -> JsonResponse:
    """One checkout of one unit of the body's first product, as the seed's transaction, with one cursor."""
    if request.method != "POST":
        return _error(405, "method_not_allowed", "POST only")
    try:
        product_id = int(json.loads(request.body)["items"][0]["product_id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return _error(400, "invalid_request", "the body names no product")
    params = {"pid": product_id, "cust": settings.FLOOR_CUSTOMER_ID}  # type: ignore[misc]  # bench.floor_settings
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(PRICE_SQL, params)
        row = cursor.fetchone()
        if row is None:
            return _error(404, "product_not_found", "no such product for sale")
        params["price"] = row[0]
        cursor.execute(ORDER_SQL, params)
        params["order_id"] = cursor.fetchone()[0]
        cursor.execute(RESERVE_SQL, params)
        if cursor.rowcount == 0:
            transaction.set_rollback(True)
            return _error(409, "stock_conflict", "not enough stock")
        if cursor.rowcount != 1:  # the seed's UPDATE names no bucket: a product in K > 1 buckets is not its case
            raise RuntimeError(f"product {product_id} has {cursor.rowcount} stock rows; the floor needs one")
        for sql in ROWS_SQL:
            cursor.execute(sql, params)
    return JsonResponse(
        {"order_id": params["order_id"], "status": "pending_payment", "total": str(params["price"])}, status=201
    )


def readyz(request: HttpRequest) -> JsonResponse:
    """For ``devtools.processes.Gunicorn.start``'s readiness wait only."""
    return JsonResponse({"status": "ok"})


urlpatterns = [path("v1/checkout", checkout), path("readyz", readyz)]
